// The device-operations interface: the few things chorus asks of a GPU
// runtime to move device buffers through pinned host memory (streams,
// events, asynchronous copies, pinned allocations, the memory kind of a
// pointer). The CUDA runtime implements it (cuda/runtime.hpp); the tests
// plug in a fake device whose memory the host cannot touch
// (tests/fake_device.hpp), so everything above this interface runs and is
// checked on machines without a GPU.
//
// `device` wraps one implementation with what the staged collectives reuse
// from call to call: pinned buffers, streams and events, in staging sets
// that one call holds at a time (cudaMallocHost takes milliseconds; a set is
// allocated once and grown when a larger call needs it).
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/core/memory_kind.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace chorus::cuda {

// cudaStream_t and cudaEvent_t are pointers; the interface carries them
// opaquely, so code above it needs no CUDA header. A null stream is the
// legacy default stream.
using stream_handle = void*;
using event_handle = void*;

class device_operations {
 public:
  virtual ~device_operations() = default;
  virtual std::string name() const = 0;
  // host, cuda_device or cuda_pinned; never throws (unknown memory is host).
  virtual memory_kind kind_of(const void* pointer) const noexcept = 0;

  virtual void* allocate_pinned(std::size_t bytes) = 0;
  virtual void free_pinned(void* pointer) noexcept = 0;
  virtual stream_handle create_stream() = 0;
  virtual void destroy_stream(stream_handle stream) noexcept = 0;
  virtual event_handle create_event() = 0;
  virtual void destroy_event(event_handle event) noexcept = 0;

  // Enqueues a copy of `bytes` on `stream`, in whichever direction the
  // pointers' kinds imply (cudaMemcpyDefault).
  virtual void copy_async(void* destination, const void* source, std::size_t bytes, stream_handle stream) = 0;
  // The event completes when the work enqueued on `stream` so far has.
  virtual void record(event_handle event, stream_handle stream) = 0;
  // Work enqueued on `stream` after this waits until `event` completes.
  virtual void stream_wait(stream_handle stream, event_handle event) = 0;
  // Whether `event` has completed; throws if the device reports an error.
  virtual bool completed(event_handle event) = 0;

  // For the direct path (cuda/router.hpp), where device memory goes to the
  // network as it is: device scratch (the ring's receive window), and
  // whether and how a transport that moves the memory kinds `moved`
  // reaches device memory. The CUDA runtime: when UCX reports CUDA memory,
  // through the device pointer itself; the fake device of the tests stands
  // in for such a UCX by handing the network its host alias.
  virtual void* allocate_device(std::size_t bytes) = 0;
  virtual void free_device(void* pointer) noexcept = 0;
  virtual bool network_reaches_device(const memory_kinds& moved) const noexcept {
    return moved.contains(memory_kind::cuda_device);
  }
  virtual void* network_address(void* device_pointer) const noexcept { return device_pointer; }
  // Whether the kind the transport registers a device buffer's network
  // address as (`registered`: ucp_mem_query's answer) lets it go direct.
  virtual bool network_registers_device(memory_kind registered) const noexcept {
    return registered == memory_kind::cuda_device;
  }
};

// How device buffers are staged through pinned host memory.
struct staging_options {
  std::size_t chunk_bytes = 4u << 20;  // one copy per chunk: large enough to run at full copy bandwidth
  int depth = 4;                       // streams (and copies) in flight at once
};

// One call's pinned buffer, streams and events.
struct staging_set {
  std::span<std::byte> pinned;
  // The direct path's, in device memory, one per slot of local_arithmetic::scratch.
  std::array<std::span<std::byte>, local_arithmetic::scratch_slots> device_scratch;
  std::vector<stream_handle> streams;
  std::vector<event_handle> events;  // events[k]: the last copy on streams[k]
};

class device {
 public:
  explicit device(device_operations& operations) : ops_(operations) {}
  ~device() {
    for (const auto& owned : sets_) release(owned->set);
  }
  device(const device&) = delete;
  device& operator=(const device&) = delete;

  device_operations& operations() noexcept { return ops_; }
  memory_kind kind_of(const void* pointer) const noexcept { return ops_.kind_of(pointer); }

  // A staging set of at least `bytes` pinned bytes and `depth` streams,
  // held until the lease ends.
  class lease {
   public:
    lease(device& owner, staging_set& set) : owner_(&owner), set_(&set) {}
    lease(lease&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)), set_(other.set_) {}
    lease& operator=(lease&&) = delete;
    ~lease() {
      if (owner_ != nullptr) owner_->give_back(*set_);
    }
    staging_set& set() const noexcept { return *set_; }

   private:
    device* owner_;
    staging_set* set_;
  };

  // At least `bytes` of device scratch in slot 0 or 1 of a leased set (the
  // direct path's receive window and work copy), kept for later calls.
  std::size_t device_scratch_bytes(const lease& held, std::size_t slot) {
    std::lock_guard lock(mutex_);
    return held.set().device_scratch.at(slot).size();
  }
  std::span<std::byte> device_scratch(const lease& held, std::size_t bytes, std::size_t slot) {
    std::lock_guard lock(mutex_);
    std::span<std::byte>& scratch = held.set().device_scratch.at(slot);
    if (scratch.size() < bytes) {
      if (!scratch.empty()) ops_.free_device(scratch.data());
      scratch = {};
      scratch = {static_cast<std::byte*>(ops_.allocate_device(bytes)), bytes};
    }
    return scratch;
  }

  lease acquire(std::size_t bytes, int depth) {
    std::lock_guard lock(mutex_);
    owned_set* chosen = nullptr;  // the largest free set, or a new one
    for (const auto& owned : sets_)
      if (!owned->busy && (chosen == nullptr || owned->set.pinned.size() > chosen->set.pinned.size()))
        chosen = owned.get();
    if (chosen == nullptr) chosen = sets_.emplace_back(std::make_unique<owned_set>()).get();
    grow(chosen->set, bytes, depth);
    chosen->busy = true;
    return lease(*this, chosen->set);
  }

 private:
  struct owned_set {
    staging_set set;
    bool busy = false;
  };

  void grow(staging_set& set, std::size_t bytes, int depth) {
    if (set.pinned.size() < bytes) {
      if (!set.pinned.empty()) ops_.free_pinned(set.pinned.data());
      set.pinned = {};
      const std::size_t rounded = std::max<std::size_t>(bytes, 1u << 20);
      set.pinned = {static_cast<std::byte*>(ops_.allocate_pinned(rounded)), rounded};
    }
    while (set.streams.size() < static_cast<std::size_t>(depth)) {
      set.streams.push_back(ops_.create_stream());
      set.events.push_back(ops_.create_event());
    }
  }

  void release(staging_set& set) noexcept {
    for (const std::span<std::byte> scratch : set.device_scratch)
      if (!scratch.empty()) ops_.free_device(scratch.data());
    if (!set.pinned.empty()) ops_.free_pinned(set.pinned.data());
    for (stream_handle s : set.streams) ops_.destroy_stream(s);
    for (event_handle e : set.events) ops_.destroy_event(e);
  }

  void give_back(staging_set& set) {
    std::lock_guard lock(mutex_);
    for (const auto& owned : sets_)
      if (&owned->set == &set) owned->busy = false;
  }

  device_operations& ops_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<owned_set>> sets_;  // stable addresses: leases point into them
};

}  // namespace chorus::cuda
