// Compressed allreduce: every rank sends encoded bytes, sums in float, and
// ends with the same bits.
//
//   chorus::allreduce(comm, grads, chorus::op::avg{}, chorus::codec::fp16{});
//   chorus::codec::error_feedback feedback{chorus::codec::int8{}};   // one per tensor
//   chorus::allreduce(comm, grads, chorus::op::sum{}, feedback);
//
// Two schemes (the selection registry, collective/machinery/selection.hpp, picks one
// unless told; CHORUS_TUNE="compressed_allreduce:..." tunes it):
// - ring (compressed_allreduce_ring.hpp): partial sums re-encoded hop by hop; chosen
//   for codecs that re-encode well (fp16, bf16) on tensors of at least 1 MiB
//   encoded. Error about n encodings of sum_r |x_r|.
// - encode once (compressed_allreduce_once.hpp): each contribution and the sum encoded
//   once; for int8 and onebit, whose error per encoding is a block's size,
//   and for small tensors. Error sum_r e(x_r) + e(sum).
// - sparse (compressed_allreduce_sparse.hpp): for the sparse codecs (topk, randomk),
//   always and only for them: an allgather of (index, value) parts, or a sum
//   of the kept values where every rank kept the same indices.
// error_bound.hpp computes the ring's or encode-once's bound for known
// contributions.
//
// Overflow: contributions are multiplied by `prescale` before encoding and
// the result divided by it after decoding (see compression_options.hpp).
//
// Device buffers (route/memory_router.hpp): on the direct path the scheme
// runs on device memory as it is, encoding and decoding with the device
// kernels (codec_compute.hpp), with the same bytes on the wire as the host;
// error feedback keeps a device tensor's residual in device memory.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/codec/error_feedback.hpp>
#include <chorus/collective/machinery/check.hpp>
#include <chorus/compressed/compressed_allreduce_algorithms.hpp>
#include <chorus/compressed/codec_compute.hpp>
#include <chorus/compressed/compression_options.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <span>
#include <string>
#include <type_traits>

namespace chorus {

namespace compressed {

template <class Op>
constexpr bool supported_op = std::is_same_v<Op, op::sum> || std::is_same_v<Op, op::avg>;

template <class Op, class Codec>
std::string signature_op(compression_scheme scheme) {
  const char* how = scheme == compression_scheme::ring ? "r" : scheme == compression_scheme::sparse ? "s" : "o";
  std::string text = std::string(op::name_of<Op>()) + "/" + how + "/" + std::string(Codec::name);
  return text.substr(0, 15);
}

}  // namespace compressed

namespace compressed {

// A sparse codec runs the sparse scheme and nothing else does; a forced or
// tuned choice that says otherwise is an error, not a silent substitute.
template <class Codec>
void require_scheme_fits(const Codec&, const choice& made, const compression_options& options) {
  const bool sparse_scheme = made.chosen == algorithm::sparse;
  if (sparse_scheme != codec::sparse<Codec>)
    throw error(errc::invalid_argument, "compressed allreduce: " + std::string(to_string(made.chosen)) + " (" +
                                            made.reason + ") cannot move " + std::string(Codec::name) +
                                            (codec::sparse<Codec> ? ", a sparse codec: only the sparse scheme does"
                                                                  : ": the sparse scheme moves only sparse codecs"));
  if (sparse_scheme && options.prescale && *options.prescale != 1.0f)
    throw error(errc::invalid_argument, "compressed allreduce: a prescale is for codecs of narrow range; " +
                                            std::string(Codec::name) + " sends floats as they are");
}

// The allreduce itself, its local computation given (codec_compute.hpp).
template <class Op, class Communicator, class Compute>
algorithm allreduce_with(Communicator& comm, std::span<float> data, const Compute& compute,
                         compression_options options) {
  using plain = typename Compute::codec_type;
  const plain& c = compute.codec();
  const int n = comm.size();
  const choice made = choose_scheme(comm, c, data.size(), options);
  require_scheme_fits(c, made, options);
  report(comm, "compressed_allreduce", c.encoded_bytes(data.size()), dtype::float32, made);
  const compression_scheme scheme = as_scheme(made.chosen);
  if (collective::check_enabled(comm))  // the signature string only when it is checked
    collective::check_agreement(
        comm, {"allreduce", data.size(), dtype::float32, signature_op<Op, plain>(scheme), -1, call_memory(data)});
  constexpr bool average = std::is_same_v<Op, op::avg>;
  const float scale = codec::sparse<plain> ? 1.0f : prescale_for<plain>(n, options);
  allreduce_by(comm, data, compute, made.chosen, average, scale, options.chunk_bytes);
  return made.chosen;
}

}  // namespace compressed

// Returns the scheme that ran: algorithm::ring, algorithm::encode_once or
// (sparse codecs) algorithm::sparse.
template <class Communicator, class Op, codec::codec_or_feedback Codec>
algorithm allreduce(Communicator& comm, std::span<float> data, Op, Codec&& coder, compression_options options = {}) {
  static_assert(compressed::supported_op<Op>, "a compressed allreduce sums (op::sum) or averages (op::avg)");
  const record::recorded_call recorded(record::recorder_of(comm),
                                       record::collective("compressed_allreduce", data, op::name_of<Op>()));
  if (memory_router* router = routed(data)) {
    algorithm ran = algorithm::automatic;
    if (compressed::run_codec_direct(
            *router, comm, "compressed_allreduce", {{data.data(), data.size_bytes(), buffer_use::read_write}}, coder,
            [&](const auto& compute) { ran = compressed::allreduce_with<Op>(comm, data, compute, options); }))
      return ran;
    return through_host(
        *router, comm, [&](std::span<float> host) { return allreduce(comm, host, Op{}, coder, options); },
        staged(data, buffer_use::read_write));
  }
  return compressed::allreduce_with<Op>(comm, data,
                                        compressed::host_codec_compute<std::remove_reference_t<Codec>>(coder), options);
}

}  // namespace chorus
