// chorus::cuda::router: device buffers through every front door.
//
//   chorus::cuda::router gpu(chorus::cuda::runtime());        // cuda/runtime.hpp
//   chorus::cuda::route_front_doors routing(gpu);              // for the whole process, until it goes
//   chorus::cuda::stream_scope ordered(stream);                // this thread's calls order on `stream`
//   chorus::allreduce(comm, std::span(device_grads, n));       // staged through pinned memory
//
// Staged path (any UCX): each device buffer a call reads is copied into
// pinned host memory (cuda/staging.hpp, after the stream's pending work),
// the host algorithm runs there, and each buffer it writes is copied back
// (the stream then waits for the copies). Pinned buffers are used in place
// once the stream's pending work is done. The results have the same bits as
// the host path, and g++ alone compiles it: no kernels.
//
// Streams: a call orders on the stream of the innermost stream_scope of its
// thread, or on the legacy default stream (null); a non-blocking collective
// carries its caller's stream to the worker that runs it.
//
// Cost per call: the host algorithm's, plus (bytes read + bytes written) /
// copy bandwidth; the copies of different chunks overlap each other.
#pragma once

#include <chorus/core/memory_router.hpp>
#include <chorus/cuda/part_staging.hpp>
#include <chorus/cuda/staging.hpp>

#include <cstddef>
#include <vector>

namespace chorus::cuda {

// The stream this thread's calls order on; null: the legacy default stream.
inline stream_handle current_stream() noexcept { return detail::thread_stream(); }

// Orders this thread's chorus calls on `stream` until the scope ends.
using stream_scope = thread_stream_scope;

class router final : public memory_router {
 public:
  explicit router(device& on, staging_options options = {}) : on_(on), options_(options) {
    stager check(on_, options_, nullptr);  // bad options fail here, not in the first collective
  }

  device& on() noexcept { return on_; }
  memory_kind kind_of(const void* data) const override { return on_.kind_of(data); }

  void through_host(std::span<const routed_buffer> buffers, function_ref<void(std::span<void* const>)> body,
                    waiter wait) override {
    stager copies(on_, options_, current_stream());
    std::vector<memory_kind> kinds;
    std::vector<std::size_t> offsets;
    std::size_t staged_bytes = 0;
    for (const routed_buffer& buffer : buffers) {
      kinds.push_back(buffer.bytes == 0 ? memory_kind::host : on_.kind_of(buffer.data));
      offsets.push_back(staged_bytes);
      if (kinds.back() == memory_kind::cuda_device) staged_bytes += aligned(buffer.bytes);
    }
    device::lease held = on_.acquire(staged_bytes, copies.depth());
    std::vector<void*> host(buffers.size());
    bool ordered_after_caller = false;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      host[i] = const_cast<void*>(buffers[i].data);
      if (kinds[i] != memory_kind::cuda_device) continue;
      host[i] = held.set().pinned.data() + offsets[i];
      if (buffers[i].use == buffer_use::write) continue;
      copies.copy_after_caller(held.set(), host[i], buffers[i].data, buffers[i].bytes, wait);
      ordered_after_caller = true;
    }
    // Pinned buffers, and device buffers only written, must not be touched
    // before the stream's pending work (a kernel still reading them) is done.
    if (!ordered_after_caller) copies.wait_for_caller(held.set(), wait);
    body(host);
    for (std::size_t i = 0; i < buffers.size(); ++i)
      if (kinds[i] == memory_kind::cuda_device && buffers[i].use != buffer_use::read)
        copies.copy_before_caller(held.set(), const_cast<void*>(buffers[i].data), host[i], buffers[i].bytes, wait);
  }

  // One device buffer staged part by part as the algorithm reports its
  // progress (part_staging.hpp); anything else as through_host.
  void through_host_in_parts(const routed_buffer& buffer, function_ref<void(void*)> body, waiter wait) override {
    if (buffer.bytes == 0 || on_.kind_of(buffer.data) != memory_kind::cuda_device)
      return memory_router::through_host_in_parts(buffer, body, wait);
    stager copies(on_, options_, current_stream());
    device::lease held = on_.acquire(buffer.bytes, copies.depth());
    part_staging parts(copies, held.set(), static_cast<std::byte*>(const_cast<void*>(buffer.data)), buffer.bytes,
                       wait);
    parts.start();
    {
      const staging_hooks_scope reporting(&parts);
      body(parts.host());
    }
    parts.finish();
  }

  void copy(void* to, const void* from, std::size_t bytes, waiter wait) override {
    if (bytes == 0) return;
    stager copies(on_, options_, current_stream());
    device::lease held = on_.acquire(0, copies.depth());
    copies.copy_after_caller(held.set(), to, from, bytes, wait);  // returns once landed: later work sees it
  }

 private:
  static std::size_t aligned(std::size_t bytes) noexcept { return (bytes + 255) / 256 * 256; }

  device& on_;
  staging_options options_;
};

// Installs `r` for every front door of the process until the scope ends
// (the one installed before comes back).
class route_front_doors {
 public:
  explicit route_front_doors(router& r) noexcept : previous_(install_memory_router(&r)) {}
  ~route_front_doors() { install_memory_router(previous_); }
  route_front_doors(const route_front_doors&) = delete;
  route_front_doors& operator=(const route_front_doors&) = delete;

 private:
  memory_router* previous_;
};

}  // namespace chorus::cuda
