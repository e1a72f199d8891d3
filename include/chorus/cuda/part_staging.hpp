// Staging one device buffer part by part, so the copies overlap the network:
// every chunk's copy in is enqueued at once (after the caller's pending
// work), each with its own event; the algorithm waits only for the chunks
// of the part it is about to touch (need), and each part it finishes goes
// back to the device at once (done), while the network moves the rest.
// With a ring allreduce, the copy in of block b+1, the network transfer of
// block b and the copy out of an earlier final block run at the same time.
//
// Cost: the host algorithm's, plus about one chunk's copy in and one
// segment's copy out that nothing hides, instead of the whole buffer's
// two copies.
#pragma once

#include <chorus/core/memory_router.hpp>
#include <chorus/cuda/device.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <string_view>
#include <thread>
#include <vector>

namespace chorus::cuda {

class part_staging final : public staging_hooks {
 public:
  using waiter = memory_router::waiter;

  part_staging(device_operations& ops, staging_set& set, const staging_options& options, stream_handle caller,
               std::byte* device_data, std::size_t bytes, waiter wait)
      : ops_(ops), set_(set), options_(options), caller_(caller), device_(device_data), bytes_(bytes), wait_(wait) {}

  part_staging(const part_staging&) = delete;
  part_staging& operator=(const part_staging&) = delete;

  // After an error, copies still in flight must not outlive the pinned
  // buffer's lease: wait for them (bounded), then free the events.
  ~part_staging() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    try {
      record_stream_tails();
    } catch (...) {
    }
    const auto quiet = [&] {
      try {
        return all_completed();
      } catch (...) {
        return true;  // the device failed: nothing more will run
      }
    };
    while (!quiet() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    for (event_handle event : chunk_events_) ops_.destroy_event(event);
  }

  std::byte* host() const noexcept { return set_.pinned.data(); }

  // Enqueues every chunk's copy in, ordered after the caller's stream.
  void start() {
    ops_.record(set_.events[0], caller_);
    for (std::size_t s = 0; s < streams(); ++s) ops_.stream_wait(set_.streams[s], set_.events[0]);
    for (std::size_t offset = 0, k = 0; offset < bytes_; offset += options_.chunk_bytes, ++k) {
      const std::size_t length = std::min(options_.chunk_bytes, bytes_ - offset);
      const stream_handle stream = set_.streams[k % streams()];
      ops_.copy_async(host() + offset, device_ + offset, length, stream);
      chunk_events_.push_back(ops_.create_event());
      ops_.record(chunk_events_.back(), stream);
    }
  }

  void need(std::size_t offset, std::size_t bytes) override {
    if (bytes == 0) return;
    const std::size_t first = offset / options_.chunk_bytes, last = (offset + bytes - 1) / options_.chunk_bytes;
    for (std::size_t k = first; k <= last && k < chunk_events_.size(); ++k)
      wait_([&] { return ops_.completed(chunk_events_[k]); }, "staging a device buffer in");
  }

  void done(std::size_t offset, std::size_t bytes) override {
    if (bytes == 0) return;
    ops_.copy_async(device_ + offset, host() + offset, bytes, set_.streams[next_out_++ % streams()]);
    copied_out_ += bytes;
  }

  // Copies out whatever the algorithm did not report final (all of it, if
  // it reported nothing), then orders the caller's stream after every copy
  // and returns once they have landed.
  void finish() {
    if (copied_out_ != bytes_) {
      need(0, bytes_);
      done(0, bytes_);
    }
    record_stream_tails();
    for (std::size_t s = 0; s < streams(); ++s) ops_.stream_wait(caller_, set_.events[s]);
    wait_([&] { return all_completed(); }, "staging a device buffer out");
  }

 private:
  std::size_t streams() const noexcept {
    return std::min(set_.streams.size(), static_cast<std::size_t>(options_.depth));
  }

  // events[s] marks everything enqueued on stream s so far.
  void record_stream_tails() {
    for (std::size_t s = 0; s < streams(); ++s) ops_.record(set_.events[s], set_.streams[s]);
  }

  // Every copy enqueued before the last record_stream_tails has run.
  bool all_completed() {
    for (event_handle event : chunk_events_)
      if (!ops_.completed(event)) return false;
    for (std::size_t s = 0; s < streams(); ++s)
      if (!ops_.completed(set_.events[s])) return false;
    return true;
  }

  device_operations& ops_;
  staging_set& set_;
  staging_options options_;
  stream_handle caller_;
  std::byte* device_;
  std::size_t bytes_;
  waiter wait_;
  std::vector<event_handle> chunk_events_;
  std::size_t next_out_ = 0;
  std::size_t copied_out_ = 0;
};

}  // namespace chorus::cuda
