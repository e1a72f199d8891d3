// identity codec: float as it is, 4 bytes per element, no error. The
// reference the lossy codecs are measured against, and the way to run a
// codec-taking code path uncompressed.
#pragma once

#include <chorus/codec/codec.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>

namespace chorus::codec {

class identity {
 public:
  static constexpr std::string_view name = "identity";

  std::size_t encoded_bytes(std::size_t n) const { return n * sizeof(float); }
  std::size_t granule() const { return 1; }

  void encode(std::span<const float> in, std::span<std::byte> out) const {
    detail::require_sizes(name, "encode", in.size(), encoded_bytes(in.size()), out.size());
    if (!in.empty()) std::memcpy(out.data(), in.data(), out.size());
  }
  void decode(std::span<const std::byte> in, std::span<float> out) const {
    detail::require_sizes(name, "decode", out.size(), encoded_bytes(out.size()), in.size());
    if (!out.empty()) std::memcpy(out.data(), in.data(), in.size());
  }
  void decode_add(std::span<const std::byte> in, std::span<float> acc) const {
    detail::require_sizes(name, "decode_add", acc.size(), encoded_bytes(acc.size()), in.size());
    for (std::size_t i = 0; i < acc.size(); ++i) {
      float value;
      std::memcpy(&value, in.data() + i * sizeof(float), sizeof(float));
      acc[i] += value;
    }
  }
  void error_bound(std::span<const float> in, std::span<float> bound) const {
    std::fill_n(bound.begin(), in.size(), 0.0f);
  }
};

template <>
inline constexpr bool reencodes_well<identity> = true;

}  // namespace chorus::codec
