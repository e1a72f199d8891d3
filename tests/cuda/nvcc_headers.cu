// Compiled by nvcc for sm_90 in every build where the CUDA toolkit is found:
// chorus's headers as a CUDA user's file includes them, next to a kernel
// and a staged allreduce on the kernel's stream. Built, not run (it needs
// a GPU); tests/gpu/ runs on one.
#include <chorus/collective.hpp>
#include <chorus/cuda/device_allreduce.hpp>
#include <chorus/cuda/kernels.cuh>
#include <chorus/cuda/runtime.hpp>

namespace {

__global__ void scale(float* x, float factor, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] *= factor;
}

}  // namespace

// A training step's tail: scale the gradients on the stream, then average
// them across ranks; the result is visible to later work on `stream`.
void average_gradients(chorus::communicator& comm, float* grads, int n, cudaStream_t stream) {
  scale<<<(n + 255) / 256, 256, 0, stream>>>(grads, 1.0f / static_cast<float>(comm.size()), n);
  chorus::cuda::device_call call;
  call.stream = stream;
  chorus::cuda::allreduce(comm, chorus::cuda::runtime(), std::span(grads, static_cast<std::size_t>(n)),
                          chorus::op::sum{}, call);
}

// The same through the front doors: a router installed once for the
// process, with the device kernels for the direct path (taken where UCX
// moves CUDA memory), the stream bound for this thread.
void average_through_front_doors(chorus::communicator& comm, float* grads, int n, cudaStream_t stream) {
  static chorus::cuda::kernels::compute kernels;
  static chorus::cuda::router gpu(chorus::cuda::runtime(), {}, &kernels);
  static chorus::cuda::route_front_doors routing(gpu);
  const chorus::cuda::stream_scope ordered(stream);
  chorus::allreduce(comm, std::span(grads, static_cast<std::size_t>(n)), chorus::op::avg{});
}

#if __has_include(<nccl.h>)
#include <chorus/nccl/library.hpp>

// The same on an NCCL communicator: NCCL's allreduce on the stream, and the
// compressed allreduce with the device kernels (int8 encoded once, NCCL
// allgathering the bytes). Needs the router above for the kernels.
void average_over_nccl(chorus::nccl::communicator& gpus, float* grads, int n, cudaStream_t stream) {
  const chorus::cuda::stream_scope ordered(stream);
  const std::span<float> tensor(grads, static_cast<std::size_t>(n));
  chorus::allreduce(gpus, tensor, chorus::op::avg{});
  chorus::allreduce(gpus, tensor, chorus::op::avg{}, chorus::codec::int8{});
}
#endif
