// Moving a device buffer through pinned host memory: chunk k goes on stream
// k mod depth, so `depth` copies are in flight at once and the copy engines
// stay busy; one event per stream marks its last copy. Both directions are
// ordered after the caller's pending work on its stream, and the caller's
// stream is ordered after the copies back, so work the caller enqueues after
// a chorus call sees its result.
//
// Cost: bytes / copy bandwidth each way, plus one launch per chunk; with the
// defaults (4 MiB chunks, 4 streams) a 64 MiB buffer is 16 copies each way.
#pragma once

#include <chorus/cuda/device.hpp>
#include <chorus/record/trace.hpp>

#include <cstddef>
#include <string_view>

namespace chorus::cuda {

// The copies a staged call makes, and what it waits with: `wait(done,
// operation)` returns once done() holds or throws (the communicator's
// poll_until: bounded by its timeout, progressing the network meanwhile,
// yielding rather than sleeping on it: a device's event wakes no socket).
class stager {
 public:
  stager(device& on, const staging_options& options, stream_handle caller)
      : ops_(on.operations()), options_(normalised(options)), caller_(caller) {}

  // `bytes` from `from` to `to`, after the caller's pending work; returns
  // once they have landed.
  template <class Wait>
  void copy_after_caller(staging_set& set, void* to, const void* from, std::size_t bytes, Wait&& wait) {
    const record::phase phase("staging copy in");
    order_after_caller(set);
    enqueue_chunks(set, to, from, bytes);
    record_tails(set);
    wait([&] { return all_completed(set); }, "staging a device buffer in");
  }

  // `bytes` from `from` to `to`; the caller's stream then waits for them,
  // and so does this call, so the pinned buffer can be reused at once.
  template <class Wait>
  void copy_before_caller(staging_set& set, void* to, const void* from, std::size_t bytes, Wait&& wait) {
    const record::phase phase("staging copy out");
    enqueue_chunks(set, to, from, bytes);
    order_caller_after(set);
    wait([&] { return all_completed(set); }, "staging a device buffer out");
  }

  // Returns once the caller's pending work has completed (for buffers the
  // host reads directly, such as pinned memory a kernel wrote).
  template <class Wait>
  void wait_for_caller(staging_set& set, Wait&& wait) {
    ops_.record(set.events[0], caller_);
    wait([&] { return ops_.completed(set.events[0]); }, "waiting for the caller's stream");
  }

  // The pieces of the above, for staging that goes part by part
  // (part_staging.hpp).

  // Work enqueued on the copy streams from now on runs after the caller's
  // pending work.
  void order_after_caller(staging_set& set) {
    ops_.record(set.events[0], caller_);
    for (std::size_t s = 0; s < streams(set); ++s) ops_.stream_wait(set.streams[s], set.events[0]);
  }

  // Enqueues chunk k of the copy on stream k mod depth; after(stream) runs
  // after each chunk's copy is enqueued (to mark it with an event).
  template <class AfterChunk = void (*)(stream_handle)>
  void enqueue_chunks(
      staging_set& set, void* to, const void* from, std::size_t bytes, AfterChunk&& after = [](stream_handle) {}) {
    auto* target = static_cast<std::byte*>(to);
    const auto* source = static_cast<const std::byte*>(from);
    std::size_t k = 0;
    for (std::size_t offset = 0; offset < bytes; offset += options_.chunk_bytes, ++k) {
      const std::size_t length = std::min(options_.chunk_bytes, bytes - offset);
      const stream_handle stream = set.streams[k % streams(set)];
      ops_.copy_async(target + offset, source + offset, length, stream);
      after(stream);
    }
  }

  // events[s] marks what is enqueued on stream s so far.
  void record_tails(staging_set& set) {
    for (std::size_t s = 0; s < streams(set); ++s) ops_.record(set.events[s], set.streams[s]);
  }

  // The caller's stream waits for everything enqueued on the copy streams.
  void order_caller_after(staging_set& set) {
    record_tails(set);
    for (std::size_t s = 0; s < streams(set); ++s) ops_.stream_wait(caller_, set.events[s]);
  }

  // Whether everything enqueued before the last record_tails has run.
  bool all_completed(staging_set& set) {
    for (std::size_t s = 0; s < streams(set); ++s)
      if (!ops_.completed(set.events[s])) return false;
    return true;
  }

  // The copy streams in use: the set's, at most depth.
  std::size_t streams(const staging_set& set) const noexcept {
    return std::min(set.streams.size(), static_cast<std::size_t>(options_.depth));
  }

  device_operations& operations() noexcept { return ops_; }
  std::size_t chunk_bytes() const noexcept { return options_.chunk_bytes; }
  int depth() const noexcept { return options_.depth; }

 private:
  static staging_options normalised(staging_options options) {
    if (options.chunk_bytes == 0) throw error(errc::invalid_argument, "staging chunk size must be positive");
    if (options.depth < 1 || options.depth > 64) throw error(errc::invalid_argument, "staging depth must be 1..64");
    return options;
  }

  device_operations& ops_;
  staging_options options_;
  stream_handle caller_;
};

}  // namespace chorus::cuda
