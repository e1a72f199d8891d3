// What the sparsifying codecs (topk.hpp, randomk.hpp) share: how many
// elements a ratio keeps, and writing kept values back into a dense tensor
// with every index checked (bytes off the wire never write out of bounds).
#pragma once

#include <chorus/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>
#include <string_view>

namespace chorus::codec::detail {

inline double checked_ratio(double ratio, std::string_view codec_name) {
  if (!(ratio > 0.0 && ratio <= 1.0))
    throw error(
        errc::invalid_argument,
        std::string(codec_name) + ": the ratio of elements kept must be in (0, 1], not " + std::to_string(ratio));
  return ratio;
}

// k = ceil(ratio n), at least one element of a non-empty tensor. The small
// slack keeps a product like 0.01 * 300 (3.0000000000000004 in double) at 3.
inline std::size_t kept_count(double ratio, std::size_t n) {
  if (n == 0) return 0;
  const double wanted = std::ceil(ratio * static_cast<double>(n) - 1e-9);
  return std::clamp<std::size_t>(static_cast<std::size_t>(std::max(wanted, 1.0)), 1, n);
}

// Indices travel as 32 bits.
inline void require_indexable(std::string_view codec_name, std::size_t n) {
  if (n > std::numeric_limits<std::uint32_t>::max())
    throw error(errc::invalid_argument, std::string(codec_name) + ": a tensor of " + std::to_string(n) +
                                            " elements has indices beyond 32 bits; split it");
}

inline float load_float(const std::byte* at) noexcept {
  float value;
  std::memcpy(&value, at, sizeof(float));
  return value;
}
inline void store_float(std::byte* at, float value) noexcept { std::memcpy(at, &value, sizeof(float)); }

// out[index] (+)= value for the kept elements; a bad index is an error,
// not a stray write.
template <bool Add>
void place(std::string_view codec_name, std::size_t index, float value, std::span<float> out) {
  if (index >= out.size())
    throw error(errc::invalid_argument, std::string(codec_name) + " decode: index " + std::to_string(index) +
                                            " is outside a " + std::to_string(out.size()) +
                                            "-element tensor (bytes of another tensor, or damaged)");
  if constexpr (Add)
    out[index] += value;
  else
    out[index] = value;
}

}  // namespace chorus::codec::detail
