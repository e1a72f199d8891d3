// chorus::cuda::allreduce: allreduce of a buffer in any memory kind.
//
//   chorus::cuda::device& gpu = chorus::cuda::runtime();        // cuda/runtime.hpp
//   chorus::cuda::allreduce(comm, gpu, std::span(device_grads, n), chorus::op::avg{}, {.stream = s});
//
// Staged path (any UCX): the device buffer is copied into pinned host memory
// (cuda/staging.hpp), reduced there by the host algorithm the registry
// chooses (or `forced`), and copied back; the result has the same bits as
// the host allreduce of the same inputs, and g++ alone compiles it (no
// kernels). Host and pinned buffers take the host path directly (pinned
// ones after the caller's stream has finished writing them).
//
// Cost: the host algorithm's, plus 2 S / copy bandwidth for the copies in
// and out. The copies of different chunks overlap each other; overlapping
// them with the network (the ring's blocks staged as its hops reach them)
// is the next step.
#pragma once

#include <chorus/collective/allreduce.hpp>
#include <chorus/cuda/staging.hpp>

#include <span>
#include <string>

namespace chorus::cuda {

// What a device-side call takes besides its buffers.
struct device_call {
  stream_handle stream = nullptr;  // the caller's stream; null: the legacy default stream
  algorithm forced = algorithm::automatic;
  staging_options staging{};
};

template <class Communicator, element T, reduction_operator Op = op::sum>
algorithm allreduce(Communicator& comm, device& on, std::span<T> data, Op op = {}, const device_call& call = {}) {
  const memory_kind kind = on.kind_of(data.data());
  const auto wait = [&](auto&& done, std::string_view operation) { comm.progress_until(done, operation); };
  stager copies(on, call.staging, call.stream);
  if (kind == memory_kind::host) return chorus::allreduce(comm, data, op, call.forced);
  device::lease held = on.acquire(kind == memory_kind::cuda_device ? data.size_bytes() : 0, copies.depth());
  if (kind == memory_kind::cuda_pinned) {
    copies.wait_for_caller(held.set(), wait);
    return chorus::allreduce(comm, data, op, call.forced);
  }
  const std::span<T> staged(reinterpret_cast<T*>(held.set().pinned.data()), data.size());
  copies.copy_after_caller(held.set(), staged.data(), data.data(), data.size_bytes(), wait);
  const algorithm ran = chorus::allreduce(comm, staged, op, call.forced);
  copies.copy_before_caller(held.set(), data.data(), staged.data(), data.size_bytes(), wait);
  return ran;
}

}  // namespace chorus::cuda
