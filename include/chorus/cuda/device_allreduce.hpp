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
// and out; with the ring (large buffers), the copies overlap the network
// block by block (part_staging.hpp) and only about a chunk's worth stays
// exposed.
#pragma once

#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/cuda/router.hpp>

#include <span>

namespace chorus::cuda {

// What a device-side call takes besides its buffers.
struct device_call {
  stream_handle stream = nullptr;  // the caller's stream; null: the legacy default stream
  algorithm forced = algorithm::automatic;
  staging_options staging{};
};

// The same as chorus::allreduce with `on` routing the buffer (router.hpp),
// whether or not a router is installed for the front doors.
template <class Communicator, element T, reduction_operator Op = op::sum>
algorithm allreduce(Communicator& comm, device& on, std::span<T> data, Op op = {}, const device_call& call = {}) {
  router staging(on, call.staging);
  const stream_scope ordered(call.stream);
  if (on.kind_of(data.data()) == memory_kind::host) return chorus::allreduce(comm, data, op, call.forced);
  return collective::allreduce_through(staging, comm, data, op, call.forced);
}

}  // namespace chorus::cuda
