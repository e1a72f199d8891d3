// The CUDA runtime behind chorus's device-operations interface, and the
// questions a program asks first: is there a GPU (`available()`), and what
// kind of memory is this pointer (`memory_kind_of`)?
//
//   if (chorus::cuda::available())
//     chorus::cuda::allreduce(comm, chorus::cuda::runtime(), std::span(device_grads, n));
//
// Needs the CUDA runtime's headers and library (target chorus::cuda links
// CUDA::cudart), not nvcc: g++ compiles this file. With no GPU or no driver,
// available() is false and every call that needs a device throws
// chorus::error with category `unavailable`, naming the CUDA error.
#pragma once

#include <chorus/cuda/device.hpp>

#include <cuda_runtime_api.h>

#include <string>

namespace chorus::cuda {

namespace detail {

inline std::string describe(cudaError_t status) {
  return std::string(cudaGetErrorName(status)) + ": " + cudaGetErrorString(status);
}

// Missing hardware or driver is `unavailable`; anything else is a failure of
// the call itself.
inline void check(cudaError_t status, const char* call) {
  if (status == cudaSuccess) return;
  (void)cudaGetLastError();  // clear it, so the next call does not see it
  const bool missing = status == cudaErrorInsufficientDriver || status == cudaErrorNoDevice ||
                       status == cudaErrorInitializationError || status == cudaErrorCudartUnloading;
  throw error(missing ? errc::unavailable : errc::invalid_argument, std::string(call) + " failed: " + describe(status));
}

}  // namespace detail

// Whether a CUDA device can be used: any error from the device count (no
// driver: 35, no device: 100) means no.
inline bool available() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return count > 0;
}

// host, cuda_device (device or managed memory) or cuda_pinned; memory CUDA
// does not know, and any error, is host. The error is cleared afterwards.
inline memory_kind memory_kind_of(const void* pointer) noexcept {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
    (void)cudaGetLastError();
    return memory_kind::host;
  }
  switch (attributes.type) {
    case cudaMemoryTypeDevice:
    case cudaMemoryTypeManaged: return memory_kind::cuda_device;
    case cudaMemoryTypeHost: return memory_kind::cuda_pinned;
    default: return memory_kind::host;
  }
}

class runtime_operations final : public device_operations {
 public:
  std::string name() const override { return "CUDA runtime"; }
  memory_kind kind_of(const void* pointer) const noexcept override { return memory_kind_of(pointer); }

  void* allocate_pinned(std::size_t bytes) override {
    void* pointer = nullptr;
    detail::check(cudaMallocHost(&pointer, bytes), "cudaMallocHost");
    return pointer;
  }
  void free_pinned(void* pointer) noexcept override { (void)cudaFreeHost(pointer); }

  stream_handle create_stream() override {
    cudaStream_t stream = nullptr;
    detail::check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    return stream;
  }
  void destroy_stream(stream_handle stream) noexcept override {
    (void)cudaStreamDestroy(static_cast<cudaStream_t>(stream));
  }

  event_handle create_event() override {
    cudaEvent_t event = nullptr;
    detail::check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    return event;
  }
  void destroy_event(event_handle event) noexcept override { (void)cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

  void copy_async(void* destination, const void* source, std::size_t bytes, stream_handle stream) override {
    detail::check(cudaMemcpyAsync(destination, source, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)),
                  "cudaMemcpyAsync");
  }
  void record(event_handle event, stream_handle stream) override {
    detail::check(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)),
                  "cudaEventRecord");
  }
  void stream_wait(stream_handle stream, event_handle event) override {
    detail::check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0),
                  "cudaStreamWaitEvent");
  }
  void* allocate_device(std::size_t bytes) override {
    void* pointer = nullptr;
    detail::check(cudaMalloc(&pointer, bytes), "cudaMalloc");
    return pointer;
  }
  void free_device(void* pointer) noexcept override { (void)cudaFree(pointer); }

  bool completed(event_handle event) override {
    const cudaError_t status = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (status == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    detail::check(status, "cudaEventQuery");
    return true;
  }
};

// The process's CUDA device (the current one of the calling thread, as the
// CUDA runtime picks it). Throws `unavailable` when there is none.
inline device& runtime() {
  if (!available())
    throw error(errc::unavailable, "no CUDA device: cudaGetDeviceCount reports none or fails (no GPU or no driver)");
  static runtime_operations operations;
  static device shared(operations);
  return shared;
}

}  // namespace chorus::cuda
