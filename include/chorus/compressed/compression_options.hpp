// What a compressed allreduce may be told: a prescale against overflow and
// which scheme moves the bytes; when not told, compressed_allreduce's list
// chooses (compressed/compressed_allreduce_algorithms.hpp).
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/core/algorithm.hpp>
#include <chorus/core/error.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace chorus {

enum class compression_scheme {
  automatic,    // ring for codecs that re-encode well on large tensors, else encode_once
  encode_once,  // each contribution encoded once; all n-1 parts in flight at once
  ring,         // pipelined ring; partial sums re-encoded at every hop
  sparse,       // sparse codecs only: allgather of parts or a sum of agreed indices
};

struct compression_options {
  // Contributions are multiplied by it before encoding and the result divided
  // by it after decoding. Default: 2^-ceil(log2 n) for codecs with a narrow
  // range (fp16), so a sum of n values near 6e4 stays finite; 1 otherwise.
  std::optional<float> prescale{};
  compression_scheme scheme = compression_scheme::automatic;
  // Encode-once only: a tensor of at least 2 chunk_bytes encoded goes through
  // in chunks of at least that many bytes (at most 4), pipelined; see
  // compressed_allreduce_once.hpp. Like every argument, the same on every rank.
  std::size_t chunk_bytes = 4u << 20;
};

namespace compressed {

// The names chorus-perf's --scheme takes and prints.
inline constexpr std::string_view scheme_name(compression_scheme scheme) {
  switch (scheme) {
    case compression_scheme::encode_once: return "once";
    case compression_scheme::ring: return "ring";
    case compression_scheme::sparse: return "sparse";
    default: return "automatic";
  }
}

constexpr algorithm as_algorithm(compression_scheme scheme) noexcept {
  switch (scheme) {
    case compression_scheme::ring: return algorithm::ring;
    case compression_scheme::encode_once: return algorithm::encode_once;
    case compression_scheme::sparse: return algorithm::sparse;
    default: return algorithm::automatic;
  }
}
constexpr compression_scheme as_scheme(algorithm chosen) noexcept {
  if (chosen == algorithm::sparse) return compression_scheme::sparse;
  return chosen == algorithm::ring ? compression_scheme::ring : compression_scheme::encode_once;
}

template <class Codec>
float prescale_for(int ranks, const compression_options& options) {
  if (options.prescale) {
    if (!(*options.prescale > 0.0f) || !std::isfinite(*options.prescale))
      throw error(errc::invalid_argument, "compressed allreduce: prescale " + std::to_string(*options.prescale) +
                                              " is not a positive finite factor");
    return *options.prescale;
  }
  if (!codec::limited_range<Codec>) return 1.0f;
  return 1.0f / static_cast<float>(std::bit_ceil(static_cast<unsigned>(ranks)));
}

}  // namespace compressed
}  // namespace chorus
