// basic_communicator: a group of ranks over one transport.
//
// It owns (shared with its sub-groups) the transport, the store connection
// and the settings; it knows its rank and size, maps its ranks to the
// transport's ranks, and hands out per-call sequence numbers that go into the
// wire tag (see tag.hpp). Every wait is bounded by the communicator's
// timeout; failures are chorus::error naming the rank, peer and operation.
// Ranks named in errors are transport (world) ranks. What the world's
// communicators share, and the order it ends in: world_state.hpp; how a
// group changes while the job runs (without, with, regrouped, admit):
// membership.hpp.
//
// Not thread-safe: one thread calls a communicator at a time.
#pragma once

#include <chorus/bootstrap/store.hpp>
#include <chorus/comm/background.hpp>
#include <chorus/comm/host_layout.hpp>
#include <chorus/comm/member_list.hpp>
#include <chorus/comm/membership.hpp>
#include <chorus/comm/options.hpp>
#include <chorus/comm/pending_merges.hpp>
#include <chorus/comm/progress_thread.hpp>
#include <chorus/comm/tag.hpp>
#include <chorus/comm/traffic.hpp>
#include <chorus/comm/world_state.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/log.hpp>
#include <chorus/record/call.hpp>
#include <chorus/record/dump_signal.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>
#include <chorus/transport/transport.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <vector>

namespace chorus {

using transport::receive_kind;

template <transport::Transport T>
class basic_communicator : public group_membership<basic_communicator<T>, T> {
 public:
  using transport_type = T;
  using request = typename T::request;

  basic_communicator() = default;  // an empty communicator: valid() is false

  // The world communicator over a connected transport (see connect.hpp).
  explicit basic_communicator(std::shared_ptr<world_state<T>> world)
      : world_(std::move(world)), rank_(world_->transport->rank()) {
    members_ = member_list::identity(world_->transport->size());
    if (!world_->journal) world_->journal = record::open_journal(world_->job, rank_, size(), world_->config.record);
    open_ring();
  }

  bool valid() const noexcept { return world_ != nullptr; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }
  std::uint32_t id() const noexcept { return id_; }
  int world_rank(int rank) const { return members_.at(static_cast<std::size_t>(rank)); }
  T& transport() const noexcept { return *world_->transport; }
  const settings& config() const noexcept { return world_->config; }
  // The job's rendezvous store; null in a job of one rank without one.
  store::connection* store() const noexcept { return world_->store.get(); }
  std::chrono::milliseconds timeout() const noexcept { return world_->config.timeout; }
  transport::clock::time_point deadline() const { return transport::clock::now() + timeout(); }

  // The host rank `rank` runs on, as a number the whole job agrees on (see
  // connect.hpp: ranks that share a kernel and its namespaces, in groups of
  // CHORUS_LOCAL_SIZE). Collectives go through shared memory among ranks
  // of one host.
  // A process that joined after connect() counts as a host of its own.
  int host(int rank) const {
    if (!world_->hosts || world_->hosts->empty()) return 0;
    const std::vector<int>& hosts = *world_->hosts;
    const auto world = static_cast<std::size_t>(world_rank(rank));
    return world < hosts.size() ? hosts[world] : static_cast<int>(hosts.size() + world);
  }
  // All of it, worked out once per communicator (host_layout.hpp).
  const host_layout& layout() const {
    if (!layout_) layout_ = std::make_shared<const host_layout>(host_layout::of(grouped_by_host(), rank_, host(rank_)));
    return *layout_;
  }
  // Whether this is a copy forked for the background thread (non-blocking
  // collectives): its shared-memory collectives use a segment of their own,
  // since they run in another order than the caller's.
  bool is_background_copy() const noexcept { return forked_; }
  std::uint64_t job() const noexcept { return world_->job; }

  // Where this communicator's calls are recorded (record/call.hpp): its
  // flight ring and the world's journal; null where CHORUS_RECORD=0 or
  // while the journal's recording is off (journal()->set_recording).
  record::target recorder() const noexcept {
    if (!ring_ || !world_->journal->recording()) return {};
    return {ring_.get(), world_->journal.get()};
  }
  record::journal* journal() const noexcept { return world_ ? world_->journal.get() : nullptr; }

  // What a collective keeps for this group of ranks under `key` (its
  // shared-memory channel), made by `make()` on first use.
  // make() runs without the lock: it may talk to the group (a setup
  // handshake) while another thread attaches for another communicator.
  template <class Attachment, class Make>
  std::shared_ptr<Attachment> attachment(const std::string& key, Make&& make) {
    {
      std::lock_guard lock(world_->attachments_mutex);
      if (const auto found = world_->attachments.find(key); found != world_->attachments.end())
        return std::static_pointer_cast<Attachment>(found->second);
    }
    std::shared_ptr<void> made = make();
    std::lock_guard lock(world_->attachments_mutex);
    return std::static_pointer_cast<Attachment>(world_->attachments.try_emplace(key, std::move(made)).first->second);
  }

  // The sequence number the next collective call takes.
  std::uint32_t sequence() const noexcept { return sequence_; }
  // A fresh sequence number for one collective call; see tag.hpp.
  std::uint32_t next_sequence() noexcept {
    const std::uint32_t current = sequence_;
    sequence_ = tag::next_sequence(sequence_);
    return current;
  }
  transport::tag_t wire_tag(std::uint32_t sequence, std::uint32_t step) const noexcept {
    return tag::make(id_, sequence, step);
  }

  // A copy that will use the next `count` sequence numbers, which this
  // communicator skips: a non-blocking collective takes its numbers at call
  // time, in call order, and runs on the background thread with the copy.
  // The copy does not keep the world alive (else the background thread could
  // end up destroying the world and joining itself); it is valid while the
  // world lives, and the world finishes all background work before it dies.
  basic_communicator fork_sequences(std::uint32_t count) {
    basic_communicator copy = *this;
    copy.world_ = std::shared_ptr<world_state<T>>(std::shared_ptr<world_state<T>>(), world_.get());
    copy.forked_ = true;
    for (std::uint32_t i = 0; i < count; ++i) next_sequence();
    return copy;
  }

  // The thread that runs this job's non-blocking collectives, in order.
  background_worker& background() {
    std::lock_guard lock(world_->background_mutex);
    if (!world_->background)
      world_->background =
          std::make_unique<background_worker>([] { T::set_thread_progress_mode(transport::progress_mode::yield); });
    return *world_->background;
  }

  // The thread that progresses the network for asynchronous schemes while
  // the caller computes; see progress_thread.hpp.
  chorus::progress_thread& progress_thread() {
    std::lock_guard lock(world_->background_mutex);
    if (world_->progress) return *world_->progress;
    if constexpr (requires(T& t) { t.poll_in_waits(std::function<bool()>{}); }) {  // a simulated rank
      world_->progress = std::make_unique<chorus::progress_thread>(chorus::progress_thread::in_waits);
      world_->transport->poll_in_waits([progress = world_->progress.get()] { return progress->poll(); });
    } else {
      world_->progress = std::make_unique<chorus::progress_thread>(
          [network = world_->transport.get()](const std::function<bool()>& done, std::chrono::milliseconds slice) {
            T::set_thread_progress_mode(transport::progress_mode::block);
            network->progress_until(done, transport::clock::now() + slice);
          });
    }
    return *world_->progress;
  }

  // The asynchronous schemes of this process whose messages may wait to be
  // merged (comm/pending_merges.hpp): a scheme opens and closes itself here.
  chorus::pending_merges& pending_merges() const noexcept { return world_->pending_merges; }
  // Raises invalid_argument if such a scheme, other than `caller`, is open
  // over another member of this group: every collective asks first.
  void require_merged(std::string_view operation, const void* caller = nullptr) const {
    world_->pending_merges.require_merged(members_, world_rank(rank_), operation, caller);
  }
  std::vector<int> world_ranks() const { return members_.to_vector(); }  // rank -> transport rank

  // Raw tagged byte transfers, for collectives.
  request isend_bytes(std::span<const std::byte> data, int peer, transport::tag_t wire,
                      receive_kind kind = receive_kind::awaited) {
    request handle = transport().isend(peer_world_rank(peer, "send"), wire, data, kind);
    if (peer == rank_) return handle;  // traffic counts what leaves the rank (a server's own shard does not)
    traffic& counters = this_thread_traffic();
    counters.bytes_sent += data.size();
    ++counters.messages_sent;
    return handle;
  }
  request irecv_bytes(std::span<std::byte> data, int peer, transport::tag_t wire,
                      receive_kind kind = receive_kind::awaited) {
    return transport().irecv(peer_world_rank(peer, "recv"), wire, data, kind);
  }

  // Typed point-to-point; `user_tag` in [0, tag::max_step] separates streams. A
  // receive posted ahead for a message that may never come (a scheme's
  // gossip, a server's next request) is `receive_kind::standing`: its
  // peer's death or departure then fails only a wait or test on it; so
  // does a standing send's (a welcome to a joiner).
  // Non-blocking calls take memory the transport moves (host and pinned;
  // device memory only with a CUDA-built UCX, after the caller's pending
  // work on its stream); send and recv take any.
  template <class U, std::size_t E>
  request isend(std::span<U, E> data, int peer, int user_tag = 0, receive_kind kind = receive_kind::awaited) {
    static_assert(std::is_trivially_copyable_v<U>);
    const record::recorded_call recorded(recorder(), record::point_to_point("isend", data, peer));
    const std::span<const std::byte> bytes = std::as_bytes(data);
    return start_moving(bytes, buffer_use::read, "isend", [&](std::span<const std::byte> moved) {
      return isend_bytes(moved, peer, user_wire_tag(user_tag, "send"), kind);
    });
  }
  template <class U, std::size_t E>
  request irecv(std::span<U, E> data, int peer, int user_tag = 0, receive_kind kind = receive_kind::awaited) {
    static_assert(std::is_trivially_copyable_v<U> && !std::is_const_v<U>);
    const record::recorded_call recorded(recorder(), record::point_to_point("irecv", data, peer));
    const std::span<std::byte> bytes = std::as_writable_bytes(data);
    return start_moving(bytes, buffer_use::write, "irecv", [&](std::span<std::byte> moved) {
      return irecv_bytes(moved, peer, user_wire_tag(user_tag, "recv"), kind);
    });
  }

  // A receive of the next message with `user_tag` from any rank of this
  // group; source_of() says who sent it, once it completed.
  template <class U, std::size_t E>
  request irecv_any(std::span<U, E> data, int user_tag = 0) {
    static_assert(std::is_trivially_copyable_v<U> && !std::is_const_v<U>);
    const record::recorded_call recorded(recorder(), record::point_to_point("irecv_any", data, -1));
    const std::span<std::byte> bytes = std::as_writable_bytes(data);
    return start_moving(bytes, buffer_use::write, "irecv", [&](std::span<std::byte> moved) {
      return transport().irecv_any(user_wire_tag(user_tag, "recv"), moved);
    });
  }
  // The rank of this group that sent what `received` (a completed receive) holds.
  int source_of(const request& received) const {
    const int sender = members_.index_of(received.peer());
    if (sender < 0)
      throw error(errc::invalid_argument, "the request has no sender in this group (not a completed receive)",
                  {transport().rank(), received.peer(), "source_of"});
    return sender;
  }

  // Device memory goes to the transport as it is on the direct path (a UCX
  // that moves CUDA memory, route/direct_path.hpp), else through pinned memory.
  template <class U, std::size_t E>
  void send(std::span<U, E> data, int peer, int user_tag = 0) {
    const record::recorded_call recorded(recorder(), record::point_to_point("send", data, peer));
    move_blocking(std::span<const std::byte>(std::as_bytes(data)), buffer_use::read, "send",
                  [&](std::span<const std::byte> moved) {
                    request handle = isend_bytes(moved, peer, user_wire_tag(user_tag, "send"));
                    wait(handle, "send");
                  });
  }

  // Receives exactly data.size() elements; a message of another size is a
  // mismatch error (a larger one never overruns the buffer). Device memory
  // as send.
  template <class U, std::size_t E>
  void recv(std::span<U, E> data, int peer, int user_tag = 0) {
    static_assert(!std::is_const_v<U>);
    const record::recorded_call recorded(recorder(), record::point_to_point("recv", data, peer));
    move_blocking(std::span<std::byte>(std::as_writable_bytes(data)), buffer_use::write, "recv",
                  [&](std::span<std::byte> moved) {
                    request handle = irecv_bytes(moved, peer, user_wire_tag(user_tag, "recv"));
                    wait(handle, "recv");
                    expect_bytes(handle, moved.size(), "recv");
                  });
  }

  void wait(request& handle, std::string_view operation = "wait") { transport().wait(handle, deadline(), operation); }
  void wait_all(std::span<request> handles, std::string_view operation = "wait_all") {
    transport().wait_all(handles, deadline(), operation);
  }
  bool test(request& handle) { return transport().test(handle); }

  // The one way a scheme waits for what only it can recognise (a peer's
  // cut, a free send buffer, the last worker's goodbye): progresses the
  // network in this thread's progress mode (CHORUS_PROGRESS) until done()
  // is true. done() may test requests, and so throw a peer's failure. Past
  // the communicator's timeout the job is abandoned (teardown stays
  // bounded) and a timeout error names `operation` and `peer` (a rank of
  // this communicator, or -1 for none in particular).
  template <class Predicate>
  void progress_until(Predicate&& done, std::string_view operation, int peer = -1) {
    if (transport().progress_until(done, deadline())) return;
    timed_out(operation, peer);
  }

  // The same for a condition the network does not signal (a device's copy
  // or kernel finishing): where progress_until would sleep on the network's
  // event descriptor (CHORUS_PROGRESS=block), this yields, so the condition
  // is seen within a time slice rather than at the next message.
  template <class Predicate>
  void poll_until(Predicate&& done, std::string_view operation, int peer = -1) {
    if (transport().poll_until(done, deadline())) return;
    timed_out(operation, peer);
  }

  void expect_bytes(const request& handle, std::size_t expected, std::string_view operation) const {
    if (handle.received_bytes() != expected)
      throw error(
          errc::mismatch,
          "expected " + std::to_string(expected) + " bytes, received " + std::to_string(handle.received_bytes()),
          {transport().rank(), handle.peer(), std::string(operation)});
  }

  // Dissemination barrier: ceil(log2 n) rounds of empty messages (see
  // disseminate). Cost: ceil(log2 n) alpha.
  void barrier() {
    const record::recorded_call recorded(recorder(), record::collective("barrier"));
    require_merged("barrier");
    const std::uint32_t sequence = next_sequence();
    disseminate(0, [&](std::uint32_t step, int to, int from) {
      swap_step(std::span<const std::byte>{}, to, std::span<std::byte>{}, from, sequence, step, "barrier");
    });
  }

  // Whether a peer (a rank of this communicator) has died or its connection
  // broke, as far as the transport has seen: the question an asynchronous
  // scheme asks before it waits on the peer, to go on without it.
  bool peer_gone(int rank) const { return transport().peer_failure(world_rank(rank)).has_value(); }

  // Ranks with the same color form a new communicator, ordered by (key, old
  // rank). A negative color yields an empty communicator (valid() false).
  // Collective over this communicator: every rank learns every (color,
  // key) by Bruck's allgather and forms the groups itself; rank 0 takes
  // the groups' ids from the job's counter and the ranks learn them by a
  // dissemination max. Cost: 2 ceil(log2 n) alpha + 8 n beta, with no rank
  // talking to more than 2 ceil(log2 n) peers (a split through rank 0
  // would have it reach all n).
  basic_communicator split(int color, int key) {
    const record::recorded_call recorded(recorder(), record::collective("split"));
    const std::uint32_t sequence = next_sequence();
    std::uint32_t next_step = 0;
    const std::vector<std::array<std::int32_t, 2>> wishes = gather_wishes({color, key}, sequence, next_step);
    std::vector<int> order(wishes.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return wishes[static_cast<std::size_t>(a)] < wishes[static_cast<std::size_t>(b)];
    });
    // The groups of non-negative color, in color order (the same on every
    // rank, so group g gets the g-th id).
    const auto color_of = [&](int parent_rank) { return wishes[static_cast<std::size_t>(parent_rank)][0]; };
    std::vector<std::vector<std::int32_t>> groups;
    for (std::size_t at = 0; at < order.size(); ++at) {
      if (color_of(order[at]) < 0) continue;
      if (groups.empty() || color_of(groups.back().front()) != color_of(order[at])) groups.emplace_back();
      groups.back().push_back(order[at]);
    }
    const std::uint32_t first_id = agree_on_ids(static_cast<std::uint32_t>(groups.size()), sequence, next_step);
    if (color < 0) return {};
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const auto position = std::find(groups[g].begin(), groups[g].end(), rank_);
      if (position != groups[g].end())
        return make_child(tag::id_after(first_id, static_cast<std::uint32_t>(g)),
                          static_cast<int>(position - groups[g].begin()), groups[g]);
    }
    return {};  // not reached: a rank of non-negative color is in its group
  }

 private:
  [[noreturn]] void timed_out(std::string_view operation, int peer) {
    transport().abandon();
    throw error(errc::timeout, "waited " + std::to_string(timeout().count()) + " ms (the communicator's timeout)",
                {transport().rank(), peer >= 0 ? world_rank(peer) : -1, std::string(operation)});
  }

  // Runs move(bytes) on `data` where it is (host memory, or device memory on
  // the direct path, at the address the transport moves), else on a pinned
  // copy (staged).
  template <class B, class Move>
  void move_blocking(std::span<B> data, buffer_use use, std::string_view operation, Move&& move) {
    memory_router* router = routed(data);
    if (router == nullptr) return move(data);
    if (!run_direct(*router, *this, operation, {{data.data(), data.size_bytes(), use}}, dtype::uint8, "",
                    [&](local_arithmetic& where) { move(on_network(where, data)); }))
      through_host(*router, *this, [&](std::span<B> host) { move(host); }, staged(data, use));
  }

  // A device pointer must not reach a transport that moves host memory only.
  // Starts a non-blocking transfer of `data`. Device memory goes on the
  // direct path, once the caller's stream has done its pending work (a
  // kernel still writing or reading the buffer), at the address the
  // transport moves; where the router does not take it, only a transport
  // that moves device memory may have it.
  template <class B, class Start>
  request start_moving(std::span<B> data, buffer_use use, std::string_view operation, Start&& start) {
    if (memory_router* router = routed(data)) {  // none for empty buffers: nothing is moved
      request handle;
      if (run_direct(*router, *this, operation, {{data.data(), data.size_bytes(), use}}, dtype::uint8, "",
                     [&](local_arithmetic& where) { handle = start(on_network(where, data)); }))
        return handle;
      check_movable(*router, data.data(), operation);
    }
    return start(data);
  }

  void check_movable(const memory_router& router, const void* data, std::string_view operation) const {
    if (router.kind_of(data) != memory_kind::cuda_device) return;
    if (world_->transport->memory_kinds().contains(memory_kind::cuda_device)) return;
    throw error(errc::invalid_argument,
                "device memory: this transport moves host memory only (UCX without CUDA); use send/recv, which "
                "stage it through pinned memory",
                {transport().rank(), -1, std::string(operation)});
  }

  int peer_world_rank(int peer, const char* operation) const {
    if (peer < 0 || peer >= size())
      throw error(errc::invalid_argument,
                  "peer " + std::to_string(peer) + " is not in [0, " + std::to_string(size()) + ")",
                  {transport().rank(), -1, operation});
    return members_[static_cast<std::size_t>(peer)];
  }

  transport::tag_t user_wire_tag(int user_tag, const char* operation) const {
    if (user_tag < 0 || static_cast<std::uint32_t>(user_tag) > tag::max_step)
      throw error(errc::invalid_argument,
                  "tag " + std::to_string(user_tag) + " is not in [0, " + std::to_string(tag::max_step) + "]",
                  {transport().rank(), -1, operation});
    return tag::make(id_, tag::point_to_point, static_cast<std::uint32_t>(user_tag));
  }

  // Dissemination: ceil(log2 n) rounds, steps first_step on; in round k
  // rank r sends to r + 2^k and receives from r - 2^k (mod n), which
  // round(step, to, from) does. After round k a rank has heard, at
  // first or second hand, from the 2^(k+1) - 1 ranks before it. Returns
  // the step after the last round's.
  template <class Round>
  std::uint32_t disseminate(std::uint32_t first_step, Round&& round) {
    const int n = size();
    std::uint32_t step = first_step;
    for (int distance = 1; distance < n; distance *= 2, ++step)
      round(step, (rank_ + distance) % n, (rank_ - distance + n) % n);
    return step;
  }

  // One round's pair: `out` to `to`, `in` (exactly its size) from `from`.
  template <class U, class V>
  void swap_step(std::span<U> out, int to, std::span<V> in, int from, std::uint32_t sequence, std::uint32_t step,
                 std::string_view operation) {
    std::array<request, 2> pair{irecv_bytes(std::as_writable_bytes(in), from, wire_tag(sequence, step)),
                                isend_bytes(std::as_bytes(out), to, wire_tag(sequence, step))};
    wait_all(pair, operation);
    expect_bytes(pair[0], in.size_bytes(), operation);
  }

  // Bruck's allgather of one wish per rank over dissemination rounds:
  // `known[i]` is rank (rank - i)'s, and a round sends the first
  // min(have, n - have) entries, which the receiver appends.
  // `next_step`: the step after its rounds.
  std::vector<std::array<std::int32_t, 2>> gather_wishes(std::array<std::int32_t, 2> mine, std::uint32_t sequence,
                                                         std::uint32_t& next_step) {
    const auto n = static_cast<std::size_t>(size());
    std::vector<std::array<std::int32_t, 2>> known(n);
    known[0] = mine;
    std::size_t have = 1;
    next_step = disseminate(0, [&](std::uint32_t step, int to, int from) {
      const std::size_t count = std::min(have, n - have);
      swap_step(std::span<const std::array<std::int32_t, 2>>(known).first(count), to,
                std::span(known).subspan(have, count), from, sequence, step, "split");
      have += count;
    });
    std::vector<std::array<std::int32_t, 2>> wishes(n);
    for (std::size_t i = 0; i < n; ++i) wishes[(static_cast<std::size_t>(rank_) + n - i) % n] = known[i];
    return wishes;
  }

  // Rank 0 takes `groups` ids from one job-wide counter (so that live
  // communicators sharing ranks never share an id; 0 is the world) and
  // every rank learns the first by a dissemination max (steps from
  // first_step on). Returns the counter's value before them.
  std::uint32_t agree_on_ids(std::uint32_t groups, std::uint32_t sequence, std::uint32_t first_step) {
    std::uint64_t first = 0;
    if (rank_ == 0 && groups > 0) {
      const std::int64_t counter =
          world_->store ? world_->store->add("chorus/communicator-ids", groups) : (world_->local_ids += groups);
      first = static_cast<std::uint64_t>(counter - groups);
    }
    disseminate(first_step, [&](std::uint32_t step, int to, int from) {
      std::uint64_t heard = 0;
      swap_step(std::span<const std::uint64_t>(&first, 1), to, std::span<std::uint64_t>(&heard, 1), from, sequence,
                step, "split");
      first = std::max(first, heard);
    });
    return static_cast<std::uint32_t>(first % tag::max_id);
  }

  std::shared_ptr<const host_groups> grouped_by_host() const {
    if (members_.is_identity() && world_->grouped_hosts) return world_->grouped_hosts;
    std::vector<int> host_of(members_.size());
    for (int r = 0; r < size(); ++r) host_of[static_cast<std::size_t>(r)] = host(r);
    return host_layout::group(host_of);
  }

  basic_communicator make_child(std::uint32_t id, int rank, const std::vector<std::int32_t>& group) const {
    basic_communicator child;
    child.world_ = world_;
    child.id_ = id;
    child.rank_ = rank;
    for (std::int32_t parent_rank : group) child.members_.push_back(members_[static_cast<std::size_t>(parent_rank)]);
    child.open_ring();
    return child;
  }

  void open_ring() {
    if (world_->journal) ring_ = world_->journal->ring_of(id_, members_.to_vector(), rank_);
  }

  friend class group_membership<basic_communicator, T>;  // membership.hpp: without, with, regrouped, ...

  std::shared_ptr<world_state<T>> world_;
  std::shared_ptr<record::ring> ring_;  // this communicator's flight ring (null: recording off)
  member_list members_;                 // this communicator's rank -> transport rank
  int rank_ = -1;
  std::uint32_t id_ = 0;
  std::uint32_t sequence_ = 1;
  bool forked_ = false;                                // a background copy (fork_sequences)
  mutable std::shared_ptr<const host_layout> layout_;  // see layout()
};

}  // namespace chorus
