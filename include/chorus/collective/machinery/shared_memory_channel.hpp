// shared_memory_channel: the segment that the ranks of one host share for
// collectives, and the flags that order their steps.
//
// Layout: a control block per rank (three step counters, each on its own
// cache line, and the byte count of its current call), then two slots of
// slot_bytes per rank. A collective runs in steps; step g uses slot g % 2 of
// every rank, so a fast rank fills its next slot while slow ones still read
// the last. Each rank moves its counters forward only:
//   posted   = g + 1: its input for step g is in its slot;
//   reduced  = g + 1: its part of step g's result is in its slot;
//   consumed = g + 1: it has read everything of step g it needs.
// Invariant: a rank writes its slot for step g only after every rank has
// consumed step g - 2 (the last use of that slot), so no slot is written
// while anyone reads it. Steps number on across calls, which all ranks make
// in the same order with the same sizes (checked: each call's byte count
// is compared at its first step).
//
// Waits are the transport's poll_until (transport.hpp), bounded by the
// communicator's timeout; a local peer that dies is a peer_failure error
// within the transport's watch interval, and either error abandons the job
// so teardown stays bounded.
//
// Setup (first use by a group, collective over it): the group's first rank
// creates the segment (transport/shared_segment.hpp) and sends its name over
// the network; each other rank maps it and answers; then the creator
// removes the name. A failure to create is sent instead of the name, so
// every rank of the group raises the same error.
#pragma once

#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/core/error.hpp>
#include <chorus/transport/shared_segment.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::collective {

class shared_memory_channel {
 public:
  enum class stage { posted = 0, reduced = 1, consumed = 2 };
  // Two slots of this many bytes per rank: large enough that the per-step
  // flag round trips vanish next to the copies, small enough that a step's
  // slots stay in the caches (docs/decision_table.md, "Inside one host").
  static constexpr std::size_t default_slot_bytes = std::size_t{512} << 10;
  static constexpr std::size_t setup_steps = 2;

  shared_memory_channel(transport::shared_segment segment, int rank, int size, std::size_t slot_bytes)
      : segment_(std::move(segment)), rank_(rank), size_(size), slot_bytes_(slot_bytes) {}

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  std::size_t slot_bytes() const noexcept { return slot_bytes_; }
  template <class A>
  std::size_t slot_count() const noexcept {
    return slot_bytes_ / sizeof(A);
  }

  static std::size_t segment_bytes(int size, std::size_t slot_bytes) {
    return slots_offset(size) + static_cast<std::size_t>(size) * 2 * slot_bytes;
  }

  // Rank `owner`'s slot for step `step`.
  template <class A>
  std::span<A> slot(int owner, std::uint64_t step) const noexcept {
    std::byte* base =
        segment_.data() + slots_offset(size_) + (static_cast<std::size_t>(owner) * 2 + step % 2) * slot_bytes_;
    return {reinterpret_cast<A*>(base), slot_bytes_ / sizeof(A)};
  }

  // Takes `steps` steps for one call; returns the first. Every call takes
  // at least one, so that ranks meet (and compare sizes) once.
  std::uint64_t begin_call(std::uint64_t steps) noexcept {
    const std::uint64_t first = next_step_;
    next_step_ += steps < 1 ? 1 : steps;
    return first;
  }
  // Records the byte count of the call whose first step is `first`; only
  // once every rank has consumed step first - 2, whose call's count the
  // same parity held (a rank that reads it may be that far behind).
  void record_call_bytes(std::uint64_t first, std::uint64_t bytes) noexcept {
    control(rank_).call_bytes[first % 2].store(bytes, std::memory_order_relaxed);
  }

  void publish(stage which, std::uint64_t step) noexcept {
    counter(rank_, which).store(step + 1, std::memory_order_release);
  }
  bool reached(int owner, stage which, std::uint64_t step) const noexcept {
    return counter(owner, which).load(std::memory_order_acquire) > step;
  }
  std::uint64_t call_bytes(int owner, std::uint64_t first_step) const noexcept {
    return control(owner).call_bytes[first_step % 2].load(std::memory_order_relaxed);
  }

 private:
  struct alignas(64) line {
    std::atomic<std::uint64_t> value{0};
  };
  struct control_block {
    std::array<line, 3> counters;                                        // by stage
    alignas(64) std::array<std::atomic<std::uint64_t>, 2> call_bytes{};  // by parity of a call's first step
  };
  static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "flags in shared memory must be lock-free");

  static std::size_t slots_offset(int size) {
    const std::size_t controls = static_cast<std::size_t>(size) * sizeof(control_block);
    return (controls + 4095) / 4096 * 4096;
  }
  control_block& control(int owner) const noexcept { return reinterpret_cast<control_block*>(segment_.data())[owner]; }
  std::atomic<std::uint64_t>& counter(int owner, stage which) const noexcept {
    return control(owner).counters[static_cast<std::size_t>(which)].value;
  }

  transport::shared_segment segment_;
  int rank_;
  int size_;
  std::size_t slot_bytes_;
  std::uint64_t next_step_ = 0;
};

// The ranks 0, ..., n-1.
inline std::vector<int> every_rank(int n) {
  std::vector<int> ranks(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) ranks[static_cast<std::size_t>(r)] = r;
  return ranks;
}

// Steps of `per_step` elements that `count` elements take (at least one:
// every call meets once).
inline std::uint64_t steps_for(std::size_t count, std::size_t per_step) {
  return std::max<std::uint64_t>((count + per_step - 1) / per_step, 1);
}

// The k-th chunk of `per_step` elements of `data` (the last may be short or,
// for empty data, empty).
template <class A>
std::span<A> chunk_of(std::span<A> data, std::uint64_t k, std::size_t per_step) {
  const std::size_t offset = std::min<std::size_t>(k * per_step, data.size());
  return data.subspan(offset, std::min(per_step, data.size() - offset));
}

// One collective call's use of a channel by the ranks `group` (ranks of
// ex's communicator, all on this host; this rank among them): it attaches
// (setting the channel up on first use) and waits on the others' flags.
template <class Communicator>
class shared_memory_call {
 public:
  using stage = shared_memory_channel::stage;

  // Every rank of ex's communicator constructs one in the same call (those
  // outside `group` too, for their own group), as it reserves the setup phase.
  shared_memory_call(exchange<Communicator>& ex, std::span<const int> group, std::uint64_t steps, std::uint64_t bytes)
      : ex_(ex), group_(group.begin(), group.end()) {
    const tag::phase setup = ex.phase(shared_memory_channel::setup_steps, "shared memory setup");
    channel_ = attach(setup);
    first_ = channel_->begin_call(steps);
    bytes_ = bytes;
    if (first_ >= 2) wait_all(stage::consumed, first_ - 2);
    channel_->record_call_bytes(first_, bytes);
  }

  shared_memory_channel& channel() const noexcept { return *channel_; }
  std::uint64_t step(std::uint64_t k) const noexcept { return first_ + k; }
  int rank() const noexcept { return channel_->rank(); }
  int size() const noexcept { return channel_->size(); }

  void publish(stage which, std::uint64_t step) noexcept { channel_->publish(which, step); }

  // Waits until every rank of the group has reached `which` for `step`.
  void wait_all(stage which, std::uint64_t step) {
    for (int owner = 0; owner < size(); ++owner) wait(owner, which, step);
  }
  // Waits until rank `owner` (of the group) has reached `which` for `step`.
  void wait(int owner, stage which, std::uint64_t step) {
    if (!channel_->reached(owner, which, step)) wait_slowly(owner, which, step);
    if (step == first_ && which == stage::posted) check_bytes(owner);
  }

 private:
  using request = typename Communicator::request;

  std::shared_ptr<shared_memory_channel> attach(const tag::phase& setup) {
    Communicator& comm = ex_.comm();
    // One channel per group, and another for the background thread's
    // calls, which interleave with the caller's in no fixed order.
    // Appended piece by piece: GCC 12 at -O3 takes "literal" + std::string
    // for an overlapping copy (-Wrestrict, GCC bug 105329).
    std::string key = "shared_memory/";
    key += std::to_string(comm.id());
    if (comm.is_background_copy()) key += "/background";
    for (int member : group_) {
      key += '/';
      key += std::to_string(comm.world_rank(member));
    }
    return comm.template attachment<shared_memory_channel>(key, [&] { return set_up(setup); });
  }

  // The setup handshake: the name (or the creator's failure) out, each
  // rank's answer (mapped, or why not) back.
  std::shared_ptr<shared_memory_channel> set_up(const tag::phase& setup) {
    Communicator& comm = ex_.comm();
    const int size = static_cast<int>(group_.size());
    int mine = 0;
    while (group_[static_cast<std::size_t>(mine)] != comm.rank()) ++mine;
    const std::size_t slot_bytes = shared_memory_channel::default_slot_bytes;
    const std::size_t bytes = shared_memory_channel::segment_bytes(size, slot_bytes);
    constexpr bool in_process = transport::ranks_in_one_process<typename Communicator::transport_type>;
    message name{};
    transport::shared_segment segment;
    if (mine == 0) {
      try {
        if (!in_process) transport::remove_orphaned_segments();
        const std::string named = transport::shared_segment::name_for(
            hex(comm.job()) + "_" + std::to_string(comm.id()) + "_" + std::to_string(++created_));
        segment = in_process ? transport::shared_segment::create_in_process(named, bytes)
                             : transport::shared_segment::create(named, bytes);
        write(name, segment.name());
      } catch (const error& failure) {
        write(name, "!" + std::string(failure.what()));
      }
      const std::string trouble = tell_group(setup, name);
      if (!trouble.empty()) throw failed(trouble);
      segment.unlink();  // everyone has mapped it: from now on no crash can leak it
      return std::make_shared<shared_memory_channel>(std::move(segment), 0, size, slot_bytes);
    }
    ex_.recv(std::span<char>(name), group_[0], setup(0));
    message answer{};
    if (name[0] == '!')
      write(answer, "!");
    else if (!(in_process ? segment.open_in_process(name.data(), bytes) : segment.open(name.data(), bytes)))
      write(answer, "!rank " + std::to_string(comm.transport().rank()) + " found no segment " + name.data());
    ex_.send(std::span<const char>(answer), group_[0], setup(1));
    if (name[0] == '!') throw failed(name.data() + 1);
    if (answer[0] == '!') throw failed(answer.data() + 1);
    return std::make_shared<shared_memory_channel>(std::move(segment), mine, size, slot_bytes);
  }

  using message = std::array<char, 256>;
  static void write(message& into, const std::string& text) {
    std::snprintf(into.data(), into.size(), "%s", text.c_str());
  }

  // The creator sends `name` to the group; returns the first failure an
  // answer reports, if any.
  std::string tell_group(const tag::phase& setup, const message& name) {
    std::vector<request> requests;
    std::vector<message> answers(group_.size());
    for (std::size_t i = 1; i < group_.size(); ++i) {
      requests.push_back(ex_.irecv(std::span<char>(answers[i]), group_[i], setup(1)));
      requests.push_back(ex_.isend(std::span<const char>(name), group_[i], setup(0)));
    }
    ex_.wait_all(requests);
    if (name[0] == '!') return name.data() + 1;
    for (const message& answer : answers)
      if (answer[0] == '!') return answer.data() + 1;
    return {};
  }

  void wait_slowly(int owner, stage which, std::uint64_t step) {
    Communicator& comm = ex_.comm();
    const int peer = group_[static_cast<std::size_t>(owner)];
    bool gone = false;
    int doomed = -1;
    const bool reached = comm.transport().poll_until(
        [&] {
          return channel_->reached(owner, which, step) || (gone = comm.peer_gone(peer)) ||
                 (doomed = doomed_peer(comm.transport())) >= 0;
        },
        comm.deadline());
    if (reached && !gone && doomed < 0) return;
    comm.transport().abandon();
    const error_context where{comm.transport().rank(), comm.world_rank(peer), std::string(ex_.operation())};
    if (gone) throw error(errc::peer_failure, "a rank sharing this host's memory is gone", where);
    if (doomed >= 0)
      throw error(errc::peer_failure,
                  "rank " + std::to_string(doomed) +
                      " died with an operation of this rank in flight: what this step waits for may depend on it",
                  {comm.transport().rank(), doomed, std::string(ex_.operation())});
    throw error(errc::timeout,
                "waited " + std::to_string(comm.timeout().count()) + " ms (the communicator's timeout) for step " +
                    std::to_string(step) + " in shared memory",
                where);
  }

  // The transport's dead peer with this rank's operations in flight (the
  // UCX transport's doomed_peer()), or -1; -1 on a transport that keeps none.
  template <class Transport>
  static int doomed_peer(const Transport& transport) {
    if constexpr (requires { transport.doomed_peer(); })
      return transport.doomed_peer();
    else
      return -1;
  }

  void check_bytes(int owner) const {
    const std::uint64_t theirs = channel_->call_bytes(owner, first_);
    if (theirs == bytes_) return;
    Communicator& comm = ex_.comm();
    comm.transport().abandon();
    throw error(errc::mismatch,
                "this rank calls with " + std::to_string(bytes_) + " bytes, the peer with " + std::to_string(theirs),
                {comm.transport().rank(), comm.world_rank(group_[static_cast<std::size_t>(owner)]),
                 std::string(ex_.operation())});
  }

  error failed(const std::string& why) const {
    Communicator& comm = ex_.comm();
    return error(errc::transport, "shared memory for the ranks of this host: " + why,
                 {comm.transport().rank(), -1, std::string(ex_.operation())});
  }

  static std::string hex(std::uint64_t value) {
    char text[17];
    std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
    return text;
  }

  static inline std::atomic<std::uint64_t> created_{0};  // segments this process made: unique names

  exchange<Communicator>& ex_;
  std::vector<int> group_;
  std::shared_ptr<shared_memory_channel> channel_;
  std::uint64_t first_ = 0;
  std::uint64_t bytes_ = 0;
};

}  // namespace chorus::collective
