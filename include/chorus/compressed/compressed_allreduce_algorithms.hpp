// The compressed allreduce's algorithms (schemes): its list, its defaults
// and its choice.
//
// Defaults (bytes: the encoded tensor): sparse codecs (top-k, random-k)
// the sparse scheme, the only one that moves them; below 1 MiB encoded the
// encode-once scheme's 2 latency terms beat the ring's 2 (n-1); above it
// the ring's steady use of one link each way wins, for codecs that
// re-encode well (fp16, bf16); int8 and onebit always encode once.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/compressed/compressed_allreduce_once.hpp>
#include <chorus/compressed/compressed_allreduce_ring.hpp>
#include <chorus/compressed/compressed_allreduce_sparse.hpp>
#include <chorus/compressed/compression_options.hpp>

#include <cstddef>
#include <span>
#include <string_view>

namespace chorus::compressed {

struct allreduce_algorithms
    : algorithm_list<algorithms::allreduce_encode_once, algorithms::allreduce_ring, algorithms::allreduce_sparse> {
  static constexpr std::string_view collective = "compressed_allreduce";
  static constexpr std::string_view defaults =
      "compressed_allreduce:0-:sparse;compressed_allreduce@2-:1M-:ring;compressed_allreduce:0-:encode_once";
};

// What compressed_allreduce's choice depends on: the encoded
// size, and whether the codec survives re-encoding.
template <codec::codec Codec>
workload workload_for(const Codec& c, int ranks, std::size_t count) {
  return {ranks, c.encoded_bytes(count), codec::reencodes_well<Codec>, codec::sparse<Codec>};
}

// The scheme a communicator runs (its CHORUS_TUNE), with the reason.
template <class Communicator, codec::codec Codec>
choice choose_scheme(const Communicator& comm, const Codec& c, std::size_t count, const compression_options& options) {
  if (comm.size() < 2 && !codec::sparse<Codec>) return {algorithm::encode_once, "one rank"};  // the two are the same
  return choose(comm, entry_of<allreduce_algorithms>(), workload_for(c, comm.size(), count),
                as_algorithm(options.scheme));
}

// The same prediction from the environment as it is now.
template <codec::codec Codec>
compression_scheme scheme_for(const Codec& c, int ranks, std::size_t count, const compression_options& options) {
  if (ranks < 2 && !codec::sparse<Codec>) return compression_scheme::encode_once;
  return as_scheme(
      choose(entry_of<allreduce_algorithms>(), workload_for(c, ranks, count), as_algorithm(options.scheme)).chosen);
}

// Runs the scheme `chosen` with its local computation (codec_compute.hpp).
template <class Communicator, class Compute>
void allreduce_by(Communicator& comm, std::span<float> data, const Compute& compute, algorithm chosen, bool average,
                  float scale, std::size_t chunk_bytes) {
  allreduce_algorithms::run_with("compressed_allreduce", chosen, comm, data, compute, average, scale, chunk_bytes);
}

}  // namespace chorus::compressed
