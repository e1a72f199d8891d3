// Compressed allreduce on a chorus::nccl::communicator:
//
//   chorus::cuda::route_front_doors routing(gpu);   // a cuda::router given device kernels
//   chorus::allreduce(gpus, std::span(device_grads, n), chorus::op::avg{}, chorus::codec::int8{});
//
// Each rank encodes its contribution once (the device kernels, through the
// router's local arithmetic, on the caller's stream), NCCL allgathers the
// encoded parts as bytes, and every rank decodes and adds them in rank
// order, so every rank ends with the same bits. Error feedback works as on
// UCX: its residual stays in device memory.
//
// Cost: NCCL's allgather of S_enc per rank ((n-1) S_enc beta received) plus
// one encode and n decodes (n S gamma_codec). Against chorus's encode-once
// over UCX (a reduce-scatter of encoded parts, 2 (n-1)/n S_enc beta) it
// moves n/2 times the bytes, but the sum is never re-encoded and it is one
// NCCL call. Error: sum_r e(x_r), each contribution encoded once
// (error_bound.hpp's encode-once bound without the e(sum) term). Prescaling
// as compressed/compression_options.hpp says; the scheme is fixed (forcing ring or encode-once is
// an error).
//
// Host memory goes through the chorus communicator's compressed allreduce.
// Device memory needs a router with device kernels; else an `unavailable`
// error that says why (the reason the router gives).
#pragma once

#include <chorus/codec/spec.hpp>
#include <chorus/compressed/compressed_allreduce.hpp>
#include <chorus/compressed/codec_compute.hpp>
#include <chorus/nccl/collectives.hpp>

#include <span>
#include <string>
#include <type_traits>

namespace chorus::nccl {

namespace detail {

// The scheme over `compute` (compressed/codec_compute.hpp: host or routed).
template <class Op, class Compute>
void compressed_allreduce_with(communicator& comm, std::span<float> data, const Compute& compute, float scale) {
  using compressed::scratch_for;
  const std::size_t count = data.size();
  const std::size_t encoded = compute.codec().encoded_bytes(count);
  const auto n = static_cast<std::size_t>(comm.size());
  std::span<const float> contribution = data;
  if (scale != 1.0f) {
    const std::span<float> scaled = compute.floats(scratch_for::contribution, count);
    compute.scale(data, scaled, scale);
    contribution = scaled;
  }
  const std::span<std::byte> mine = compute.bytes(scratch_for::mine, encoded);
  compute.encode(contribution, mine, 0, 0, count);
  const std::span<std::byte> everyone = compute.bytes(scratch_for::gathered, encoded * n);
  // The stream orders NCCL after the encode, and the decodes after NCCL.
  comm.run("compressed_allreduce", [&](endpoint& nccl, stream_handle stream) {
    nccl.all_gather(mine.data(), everyone.data(), encoded, dtype::uint8, stream);
  });
  compute.zero(data);
  for (std::size_t r = 0; r < n; ++r) compute.decode_add(everyone.subspan(r * encoded, encoded), data);
  compute.unscale(data, scale);
  if constexpr (std::is_same_v<Op, op::avg>) compute.divide(data, static_cast<float>(n));
  compute.settle();
}

}  // namespace detail

template <class Op, codec::codec_or_feedback Codec>
algorithm allreduce(communicator& comm, std::span<float> data, Op, Codec&& coder, compression_options options = {}) {
  static_assert(compressed::supported_op<Op>, "a compressed allreduce sums (op::sum) or averages (op::avg)");
  if (!comm.moves("compressed_allreduce", data)) return chorus::allreduce(comm.host(), data, Op{}, coder, options);
  using coder_type = std::remove_reference_t<Codec>;
  using plain = typename codec::codec_of<std::remove_cvref_t<Codec>>::type;
  if (options.scheme != compression_scheme::automatic)
    throw error(errc::invalid_argument,
                "on an NCCL communicator the compressed allreduce is one allgather of encoded parts; the scheme "
                "cannot be chosen",
                {comm.host().transport().rank(), -1, "compressed_allreduce"});
  const record::recorded_call recorded(comm.host().recorder(),
                                       record::collective("compressed_allreduce", data, op::name_of<Op>()));
  const algorithm ran = detail::begin<float>(comm, "allreduce", data.size(),
                                             std::string(op::name_of<Op>()) + "/" + std::string(plain::name),
                                             detail::no_root, algorithm::automatic);
  const float scale = compressed::prescale_for<plain>(comm.size(), options);
  memory_router* router = routed(data);
  if (router == nullptr) {  // memory the host reaches (the host adapter's)
    detail::compressed_allreduce_with<Op>(comm, data, compressed::host_codec_compute<coder_type>(coder), scale);
    return ran;
  }
  if constexpr (codec::describable<plain>) {
    const routed_buffer view{data.data(), data.size_bytes(), buffer_use::read_write};
    // NCCL moves device memory: the router is asked only whether it has the kernels.
    const path_report path = router->direct_path(view, codec::spec_of(codec::codec_of<coder_type>::get(coder)),
                                                 network_memory{{memory_kind::host, memory_kind::cuda_device}});
    if (!path.direct)
      throw error(errc::unavailable, "device memory needs device kernels for the codec here: " + path.reason,
                  {comm.host().transport().rank(), -1, "compressed_allreduce"});
    router->through_direct(
        view,
        [&](local_arithmetic& where) {
          detail::compressed_allreduce_with<Op>(comm, data, compressed::routed_codec_compute<coder_type>(coder, where),
                                                scale);
        },
        chorus::detail::waiting_on(comm.host()));
    return ran;
  } else {
    throw error(errc::unavailable, std::string(plain::name) + " has no device kernels; NCCL moves device memory only",
                {comm.host().transport().rank(), -1, "compressed_allreduce"});
  }
}

}  // namespace chorus::nccl

// A using-declaration sees only what was declared before it: this one adds
// the compressed overload to chorus::allreduce (see collectives.hpp).
namespace chorus {
using nccl::allreduce;
}  // namespace chorus
