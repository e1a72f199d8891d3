// libFuzzer target for what a peer sends the schemes and the windows: a
// malformed frame must become a chorus::error naming the peer, never a
// crash, a sanitizer report, a write out of bounds or a changed model.
// scripts/fuzz builds and runs it (with the store's target).
//
// Byte 0 picks what the rest of the input feeds:
//   0  the wire header (averaging/wire.hpp) as GoSGD's merge, easgd's
//      server and a parameter server's worker read it, and the values it
//      carries (a weight, a count, a rank)
//   1  a codec's decode of a payload (GoSGD pushes, window entries), every
//      codec of the list, and a window entry's header (window/slot.hpp)
//   2  a parameter server's shard (averaging/parameter_shard.hpp) serving
//      2-3 workers whose streams of requests are the input, over a
//      scripted communicator: checked after each message that one that is
//      refused changed neither the shard nor its version
//   3  an admission welcome (averaging/admission.hpp) as a GoSGD joiner reads it
//   4  a window's relay (window/relay.hpp) applying a neighbour's operations
//      to a region, over a scripted transport: checked that nothing outside
//      the region is touched and a write lands exactly where it says
#include <chorus/averaging/admission.hpp>
#include <chorus/averaging/parameter_shard.hpp>
#include <chorus/averaging/wire.hpp>
#include <chorus/codec/codec_list.hpp>
#include <chorus/window/relay.hpp>
#include <chorus/window/slot.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <initializer_list>
#include <map>
#include <span>
#include <vector>

namespace averaging = chorus::averaging;
namespace wire = chorus::averaging::wire;
namespace windows = chorus::windows;

namespace {

void require(bool condition) {
  if (!condition) std::abort();
}

// The input, read front to back; past its end every read is zero.
class input {
 public:
  explicit input(std::span<const std::byte> bytes) : bytes_(bytes) {}
  bool empty() const noexcept { return bytes_.empty(); }
  std::uint8_t u8() {
    const std::span<const std::byte> one = take(1);
    return one.empty() ? 0 : std::to_integer<std::uint8_t>(one[0]);
  }
  std::uint16_t u16() { return static_cast<std::uint16_t>(u8() | (u8() << 8)); }
  std::span<const std::byte> bytes(std::size_t count) { return take(count); }
  std::span<const std::byte> rest() { return take(bytes_.size()); }

 private:
  std::span<const std::byte> take(std::size_t count) {
    count = std::min(count, bytes_.size());
    const std::span<const std::byte> taken = bytes_.first(count);
    bytes_ = bytes_.subspan(count);
    return taken;
  }
  std::span<const std::byte> bytes_;
};

// Runs `read`; a chorus::error of an `allowed` category is a refusal,
// anything else thrown is a finding.
template <class Read>
bool refused(Read&& read, std::initializer_list<chorus::errc> allowed = {chorus::errc::mismatch}) {
  try {
    read();
    return false;
  } catch (const chorus::error& failure) {
    require(std::find(allowed.begin(), allowed.end(), failure.category()) != allowed.end());
    return true;
  }
}

// --- 0: the wire header and its values -------------------------------------
void wire_header(input& in) {
  const wire::reader from{0, 1, "fuzz"};
  const std::size_t payload_bytes = in.u8();
  const std::uint8_t expected_kinds = in.u8();
  const std::span<const std::byte> frame = in.rest();
  wire::message message(payload_bytes + 8);
  const std::size_t received = std::min(frame.size(), message.buffer().size());
  std::copy_n(frame.begin(), received, message.buffer().begin());
  std::vector<wire::message::expected_kind> kinds;
  for (std::uint32_t k = 1; k <= 8; ++k)
    if (expected_kinds & (1u << (k - 1)))
      kinds.push_back(
          {static_cast<wire::kind>(k), wire::carries_payload(static_cast<wire::kind>(k)) ? payload_bytes : 0});
  wire::header head{};
  if (refused([&] { head = message.read(received, kinds, from); })) return;
  require(received == sizeof(wire::header) + head.payload_bytes);
  require(std::any_of(kinds.begin(), kinds.end(), [&](const auto& k) { return k.what == head.what; }));
  require(!refused([&] { wire::expect_sequence(head, head.sequence, from); }));
  require(refused([&] { wire::expect_sequence(head, head.sequence + 1, from); }));
  double weight = 0;
  if (!refused([&] { weight = wire::weight_of(head, from); })) require(weight >= 0 && std::isfinite(weight));
  std::uint64_t count = 0;
  if (!refused([&] { count = wire::count_of(head, from); })) require(static_cast<double>(count) == head.value);
  int rank = -1;
  if (!refused([&] { rank = wire::rank_of(head, 5, from); })) require(rank >= 0 && rank < 5);
}

// --- 1: codec payloads and window entry headers ------------------------------
void codec_payload(input& in) {
  const std::uint8_t which = in.u8();
  const std::size_t n = in.u16() % 4097;
  const std::span<const std::byte> payload = in.rest();
  std::size_t index = 0;
  chorus::codec::codecs::for_each([&]<class C>() {
    if (index++ != which % 7) return;
    const C coder{};
    // The payload a push of n elements carries: as long as due, or as sent.
    for (const bool sized : {true, false}) {
      std::vector<std::byte> bytes(payload.begin(), payload.end());
      if (sized) bytes.resize(coder.encoded_bytes(n));
      std::vector<float> out(n, 1.0f), sum(n, 1.0f);
      refused([&] { coder.decode(bytes, out); }, {chorus::errc::invalid_argument});
      refused([&] { coder.decode_add(bytes, sum); }, {chorus::errc::invalid_argument});
    }
  });
  if (payload.size() >= sizeof(windows::entry_header)) {
    windows::entry_header got{};
    if (!refused([&] { got = windows::checked_header(payload.data(), 3, n, "fuzz", 0, 1); }))
      require((got.kind == windows::entry_kind::put || got.kind == windows::entry_kind::accumulate) &&
              got.number == 3 && got.payload_bytes == n && got.p - got.p == 0.0);
  }
}

// --- 2: a parameter server's shard over a scripted communicator ------------
struct scripted_request {
  std::span<std::byte> into;
  int peer = -1;
  std::size_t stream = 0;  // a receive's: which queue of scripted_inbox it takes from
  bool done_ = true;       // a send is done at once
  std::size_t received = 0;
  bool done() const noexcept { return done_; }
  std::size_t received_bytes() const noexcept { return received; }
};

// The messages the input made, queued by stream (a peer, a tag): a receive
// takes the next of its stream, and one longer than the receive is an
// error of category `truncated`, as the transport's truncation is.
class scripted_inbox {
 public:
  void deliver(std::size_t stream, std::vector<std::byte> message) { queues_[stream].push_back(std::move(message)); }

  bool test(scripted_request& pending, chorus::errc truncated) {
    if (pending.done_) return true;
    std::deque<std::vector<std::byte>>& queued = queues_[pending.stream];
    if (queued.empty()) return false;
    const std::vector<std::byte> message = std::move(queued.front());
    queued.pop_front();
    if (message.size() > pending.into.size())
      throw chorus::error(truncated, "message truncated", {0, pending.peer, "fuzz receive"});
    std::copy(message.begin(), message.end(), pending.into.begin());
    pending.received = message.size();
    pending.done_ = true;
    return true;
  }

 private:
  std::map<std::size_t, std::deque<std::vector<std::byte>>> queues_;
};

// The communicator a shard serves on: rank 0 the server, 1..W its workers,
// whose messages come from the input; a message longer than its receive
// is the transport's error, as UCX's truncation is.
class scripted_comm {
 public:
  using request = scripted_request;
  explicit scripted_comm(int size) : size_(size) {}

  int rank() const noexcept { return 0; }
  int size() const noexcept { return size_; }
  int world_rank(int rank) const noexcept { return rank; }
  bool peer_gone(int) const noexcept { return false; }

  request irecv(std::span<std::byte> into, int peer, int, chorus::transport::receive_kind) {
    return {into, peer, static_cast<std::size_t>(peer), false, 0};
  }
  request isend(std::span<const std::byte>, int peer, int, chorus::transport::receive_kind = {}) {
    return {{}, peer, 0, true, 0};
  }
  void wait(request&, const char*) {}
  bool test(request& pending) { return inbox_.test(pending, chorus::errc::transport); }

  void deliver(int peer, std::vector<std::byte> message) {
    inbox_.deliver(static_cast<std::size_t>(peer), std::move(message));
  }

 private:
  int size_;
  scripted_inbox inbox_;
};

// A well-formed message most of the time (so the fuzzer gets past the
// header), its header and payload then bent by the input.
std::vector<std::byte> next_request(input& in, std::size_t shard_bytes, std::uint64_t& sequence) {
  const std::uint8_t shape = in.u8();
  if (shape % 4 == 0) {  // raw bytes
    const auto raw = in.bytes(in.u16() % (shard_bytes + 64));
    return {raw.begin(), raw.end()};
  }
  static constexpr wire::kind kinds[] = {wire::kind::push,    wire::kind::pull,  wire::kind::done,
                                         wire::kind::leaving, wire::kind::reply, wire::kind::cut};
  const wire::kind what = kinds[in.u8() % 6];
  wire::header head{what, 0, shape % 4 == 1 ? sequence + 1 : in.u16(), 0.0, 0};
  const std::uint8_t value = in.u8();
  head.value =
      value < 200 ? static_cast<double>(value % 8) : std::array{-1.0, 0.5, 1e300, std::nan(""), 1e20, -0.0}[value % 6];
  const std::size_t payload = what == wire::kind::push && shape % 4 != 3 ? shard_bytes : in.u8() % 9;
  head.payload_bytes = shape % 8 == 7 ? in.u16() : payload;
  std::vector<std::byte> message(sizeof head + payload);
  std::memcpy(message.data(), &head, sizeof head);
  const auto values = in.bytes(payload);
  std::copy(values.begin(), values.end(), message.begin() + sizeof head);
  if (head.sequence == sequence + 1) ++sequence;
  return message;
}

void shard_serving(input& in) {
  const std::uint8_t setup = in.u8();
  const int workers = 2 + setup % 2;
  averaging::shard_rules rules;
  rules.mode = static_cast<averaging::consistency>((setup / 2) % 3);
  rules.staleness = (setup / 8) % 3;
  const std::size_t elements = 1 + (setup / 32) % 5;
  scripted_comm comm(workers + 1);
  averaging::peer_losses losses;
  std::vector<int> ranks;
  for (int w = 1; w <= workers; ++w) ranks.push_back(w);
  const std::vector<float> start(elements, 0.5f);
  averaging::parameter_shard<scripted_comm> shard(comm, start, ranks, rules, losses);
  std::vector<std::uint64_t> sequences(static_cast<std::size_t>(workers) + 1, 0);
  while (!in.empty()) {
    const int worker = 1 + in.u8() % workers;
    comm.deliver(worker, next_request(in, shard.bytes(), sequences[static_cast<std::size_t>(worker)]));
    const std::vector<float> before(shard.values().begin(), shard.values().end());
    const std::uint64_t version = shard.version();
    if (refused([&] { shard.serve(); }, {chorus::errc::mismatch, chorus::errc::transport})) {
      // Refused: the message that failed changed nothing (one served
      // before it in the same call may have: compare with what it left).
      require(shard.version() >= version);
      if (shard.version() == version)
        require(std::equal(before.begin(), before.end(), shard.values().begin(),
                           [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }));
      return;  // a refused stream is a failed job: the scheme raises
    }
  }
}

// --- 3: an admission welcome --------------------------------------------------
void admission_welcome(input& in) {
  const int capacity = 1 + in.u8() % 16;
  const int joiner = in.u8() % (capacity + 1);
  std::vector<std::int64_t> words;
  while (!in.empty()) {
    const std::uint8_t shape = in.u8();
    words.push_back(shape < 240 ? static_cast<std::int64_t>(shape % 20) - 2
                                : static_cast<std::int64_t>(in.u16()) << (shape % 48));
  }
  averaging::admission::group_description group;
  if (refused([&] {
        group = averaging::admission::group_description::parse(words, capacity, joiner, {joiner, 0, "fuzz"});
      }))
    return;
  require(!group.members.empty());
  for (const std::vector<int>* ranks : {&group.members, &group.collective})
    for (std::size_t k = 0; k < ranks->size(); ++k) {
      const int rank = (*ranks)[k];
      require(rank >= 0 && rank < capacity && rank != joiner);
      require(std::count(ranks->begin(), ranks->end(), rank) == 1);
    }
  for (int gone : group.gone) require(std::count(group.members.begin(), group.members.end(), gone) == 1);
  require(group.words() == words);  // what parses is what rank 0 would have written
}

// --- 4: a window's relay over a scripted transport ----------------------------
class scripted_transport {
 public:
  using request = scripted_request;

  request irecv(int peer, chorus::transport::tag_t tag, std::span<std::byte> into, chorus::transport::receive_kind) {
    return {into, peer, static_cast<std::size_t>(tag), false, 0};
  }
  request isend(int peer, chorus::transport::tag_t, std::span<const std::byte>) { return {{}, peer, 0, true, 0}; }
  bool peer_failure(int) const noexcept { return false; }
  bool test(request& pending) { return inbox.test(pending, chorus::errc::mismatch); }

  scripted_inbox inbox;  // by tag
};

void window_relay(input& in) {
  const windows::relay_tags tags{1, 2, 3};
  const std::size_t region_bytes = 8 * (1 + in.u8() % 24);
  // The region with guard bytes either side, which no operation may touch.
  constexpr std::size_t guard = 64;
  std::vector<std::byte> memory(region_bytes + 2 * guard, std::byte{0xa5});
  const std::span<std::byte> region = std::span(memory).subspan(guard, region_bytes);
  std::fill(region.begin(), region.end(), std::byte{0});
  scripted_transport network;
  windows::relay_server<scripted_transport> relay(network, region, tags, {1}, 0);
  std::vector<std::byte> expected(region.begin(), region.end());  // the region as the ops so far left it
  while (!in.empty()) {
    windows::relay_op op{};
    const std::uint8_t shape = in.u8();
    op.what = static_cast<windows::relay_kind>(shape % 7);
    op.offset = shape >= 224 ? (std::uint64_t{in.u16()} << 48) | in.u16() : in.u8();
    op.bytes = shape % 16 == 15 ? ~std::uint64_t{0} - in.u8() : in.u8() % 40;
    std::vector<std::byte> raw(sizeof op);
    std::memcpy(raw.data(), &op, sizeof op);
    if (shape % 32 == 31) raw.resize(in.u8() % sizeof op);  // a short op
    network.inbox.deliver(tags.request, raw);
    const bool writes = op.what == windows::relay_kind::write;
    std::vector<std::byte> payload;
    if (writes) {
      const auto given = in.bytes(std::min<std::uint64_t>(op.bytes, 64));
      payload.assign(given.begin(), given.end());
      network.inbox.deliver(tags.payload, payload);
    }
    if (refused([&] {
          while (relay.serve()) {}
        }))
      break;
    // Served, so whole, known and inside (a counter's 8 bytes, aligned).
    if (writes) std::copy(payload.begin(), payload.end(), expected.begin() + static_cast<std::ptrdiff_t>(op.offset));
    if (op.what == windows::relay_kind::increment) {
      require(op.offset % 8 == 0 && op.offset + 8 <= region_bytes);
      windows::counter_at(expected.data(), op.offset).fetch_add(1);
    }
    require(raw.size() == sizeof op && op.offset <= region_bytes &&
            (op.what == windows::relay_kind::increment || op.what == windows::relay_kind::load ||
             op.bytes <= region_bytes - op.offset));
    require(std::equal(expected.begin(), expected.end(), region.begin()));
  }
  for (std::size_t k = 0; k < guard; ++k)
    require(memory[k] == std::byte{0xa5} && memory[guard + region_bytes + k] == std::byte{0xa5});
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  input in(std::span(reinterpret_cast<const std::byte*>(data) + 1, size - 1));
  switch (data[0] % 5) {
    case 0: wire_header(in); break;
    case 1: codec_payload(in); break;
    case 2: shard_serving(in); break;
    case 3: admission_welcome(in); break;
    case 4: window_relay(in); break;
  }
  return 0;
}
