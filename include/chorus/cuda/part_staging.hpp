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

#include <chorus/cuda/device.hpp>
#include <chorus/cuda/staging.hpp>
#include <chorus/record/trace.hpp>
#include <chorus/route/memory_router.hpp>

#include <chrono>
#include <cstddef>
#include <string_view>
#include <thread>
#include <vector>

namespace chorus::cuda {

class part_staging final : public staging_hooks {
 public:
  using waiter = memory_router::waiter;

  // `copies` orders after and before the caller's stream; `set` holds the
  // pinned buffer (at least `bytes`) and the copy streams.
  part_staging(stager& copies, staging_set& set, std::byte* device_data, std::size_t bytes, waiter wait)
      : copies_(copies), ops_(copies.operations()), set_(set), device_(device_data), bytes_(bytes), wait_(wait) {}

  part_staging(const part_staging&) = delete;
  part_staging& operator=(const part_staging&) = delete;

  // After an error, copies still in flight must not outlive the pinned
  // buffer's lease: wait for them (bounded), then free the events.
  ~part_staging() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    const auto quiet = [&] {
      try {
        return all_completed();
      } catch (...) {
        return true;  // the device failed: nothing more will run
      }
    };
    try {
      copies_.record_tails(set_);
      while (!quiet() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    } catch (...) {}
    for (event_handle event : chunk_events_) ops_.destroy_event(event);
  }

  std::byte* host() const noexcept { return set_.pinned.data(); }

  // Enqueues every chunk's copy in, ordered after the caller's stream, each
  // marked by its own event.
  void start() {
    copies_.order_after_caller(set_);
    copies_.enqueue_chunks(set_, host(), device_, bytes_, [&](stream_handle stream) {
      chunk_events_.push_back(ops_.create_event());
      ops_.record(chunk_events_.back(), stream);
    });
  }

  void need(std::size_t offset, std::size_t bytes) override {
    if (bytes == 0) return;
    const std::size_t chunk = copies_.chunk_bytes(), first = offset / chunk, last = (offset + bytes - 1) / chunk;
    const record::phase phase("staging wait in");
    for (std::size_t k = first; k <= last && k < chunk_events_.size(); ++k)
      wait_([&] { return ops_.completed(chunk_events_[k]); }, "staging a device buffer in");
  }

  void done(std::size_t offset, std::size_t bytes) override {
    if (bytes == 0) return;
    ops_.copy_async(device_ + offset, host() + offset, bytes, set_.streams[next_out_++ % copies_.streams(set_)]);
    copied_out_ += bytes;
  }

  // Copies out whatever the algorithm did not report final (all of it, if
  // it reported nothing), then orders the caller's stream after every copy
  // and returns once they have landed.
  void finish() {
    const record::phase phase("staging copy out");
    if (copied_out_ != bytes_) {
      need(0, bytes_);
      done(0, bytes_);
    }
    copies_.order_caller_after(set_);
    wait_([&] { return all_completed(); }, "staging a device buffer out");
  }

 private:
  // Every copy in, and every copy enqueued before the copy streams' tails
  // were last recorded, has run.
  bool all_completed() {
    for (event_handle event : chunk_events_)
      if (!ops_.completed(event)) return false;
    return copies_.all_completed(set_);
  }

  stager& copies_;
  device_operations& ops_;
  staging_set& set_;
  std::byte* device_;
  std::size_t bytes_;
  waiter wait_;
  std::vector<event_handle> chunk_events_;
  std::size_t next_out_ = 0;
  std::size_t copied_out_ = 0;
};

}  // namespace chorus::cuda
