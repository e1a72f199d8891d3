// The Transport concept: what chorus needs from a network layer.
//
// A transport connects `size` ranks and moves byte ranges between them with
// non-blocking tagged send/recv. Requests are tested or waited; nothing moves
// unless someone calls progress() (or waits). A transport declares the
// memory kinds it can move; higher layers stage the others.
//
// Tag space: a transport may reserve high tag bits for its own matching (UCX
// matches on tags only, so ucx_transport puts the sender's rank there). Callers
// get `user_tag_bits` bits; the communicator encodes (communicator, sequence,
// step) in them so that concurrent operations never steal each other's data.
//
// Threading: one thread drives a transport at a time from the caller's side;
// the transport serialises internally so that a communicator-owned progress
// thread may call progress() concurrently with the caller's calls.
#pragma once

#include <chorus/core/memory_kind.hpp>

#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace chorus::transport {

using tag_t = std::uint64_t;
using clock = std::chrono::steady_clock;

inline constexpr int rank_bits = 17;  // 131,072 ranks; the rest is the communicator's (comm/tag.hpp)
inline constexpr int user_tag_bits = 64 - rank_bits;
inline constexpr tag_t user_tag_mask = (tag_t{1} << user_tag_bits) - 1;
inline constexpr int max_ranks = 1 << rank_bits;

// How a thread waits for a request: spin (lowest latency, burns a core),
// yield (spin but give the core away when nothing progressed), block (sleep
// in the kernel until the network signals; for more ranks than cores).
enum class progress_mode { spin, yield, block };

constexpr std::string_view to_string(progress_mode mode) noexcept {
  switch (mode) {
    case progress_mode::spin: return "spin";
    case progress_mode::yield: return "yield";
    case progress_mode::block: return "block";
  }
  return "unknown";
}

// What a receive waits for. An awaited receive belongs to an exchange its
// caller waits on (a collective's step, a reply). A standing one is posted
// ahead for a message that may never come (a gossip push, a server's next
// request): a peer that dies or leaves with only standing receives pending
// fails a wait or test on those receives, and nothing else, where an awaited
// operation in flight with a dead peer fails every wait (it can never
// complete, and what the caller waits for likely depends on it). A send may
// be standing too: one nothing else depends on (the welcome a scheme sends
// a process that joins, which may die before it takes it).
enum class receive_kind { awaited, standing };

template <class R>
concept Request = std::movable<R> && requires(const R& request) {
  { request.done() } -> std::same_as<bool>;
  { request.peer() } -> std::same_as<int>;
  { request.received_bytes() } -> std::same_as<std::size_t>;
};

template <class T>
concept Transport =
    Request<typename T::request> &&
    requires(T& transport, const T& view, int peer, tag_t tag, std::span<const std::byte> input,
             std::span<std::byte> output, typename T::request& request, std::span<typename T::request> requests,
             clock::time_point deadline, std::string_view operation, bool (&predicate)(), progress_mode mode,
             receive_kind kind, const void* buffer, std::size_t bytes) {
      { view.rank() } -> std::same_as<int>;
      { view.size() } -> std::same_as<int>;
      // The kinds of memory it moves, and the kind it takes one buffer for
      // (the direct path asks both before it hands over device memory).
      { view.memory_kinds() } -> std::same_as<chorus::memory_kinds>;
      { transport.registered_kind(buffer, bytes) } -> std::same_as<chorus::memory_kind>;
      { transport.isend(peer, tag, input, kind) } -> std::same_as<typename T::request>;
      { transport.irecv(peer, tag, output, kind) } -> std::same_as<typename T::request>;
      { transport.progress() } -> std::same_as<bool>;
      { transport.test(request) } -> std::same_as<bool>;
      // Waits until every request completed; throws chorus::error (timeout,
      // peer_failure, mismatch on truncation, transport) naming `operation`.
      { transport.wait_all(requests, deadline, operation) } -> std::same_as<void>;
      // True once an operation failed or timed out (the job is going down).
      { view.failed() } -> std::same_as<bool>;
      // Declares the job failed from above (teardown then abandons, bounded).
      { transport.abandon() } -> std::same_as<void>;
      // The waiting policy, the one loop every wait above goes through:
      // progresses until predicate() is true or the deadline passes, in the
      // calling thread's progress mode; returns predicate().
      { transport.progress_until(predicate, deadline) } -> std::same_as<bool>;
      // The same for a condition the network does not signal (a flag in
      // shared memory): never sleeps on the network's events.
      { transport.poll_until(predicate, deadline) } -> std::same_as<bool>;
      // Sets the calling thread's progress mode (a background thread should
      // not spin; the progress thread blocks).
      { T::set_thread_progress_mode(mode) } -> std::same_as<void>;
    };

}  // namespace chorus::transport
