// Low-bit float codecs: fp8_e4m3, fp8_e5m2 (one byte per element) and
// fp4_e2m1 (half a byte), in blocks of `block` elements (default 32, as
// OCP's microscaling formats) under one power-of-two scale 2^k per block,
// sent as a byte before the block's codes. k is the least with the block's
// largest magnitude <= the format's largest x 2^k (448, 57344, 6), so no
// element saturates; each element is then x 2^-k rounded once to the
// nearest code, ties to even (codec/elements.hpp).
//
//   codec         bytes per 32 elements   smaller than float   error (normal range)
//   fp8_e4m3      33                      3.88x                |x| 2^-4
//   fp8_e5m2      33                      3.88x                |x| 2^-3
//   fp4_e2m1      17                      7.53x                |x| 2^-2
//
// Error: |decoded - x| <= max(|x| 2^-(mantissa_bits + 1), 2^(k - bias -
// mantissa_bits)): half a step in x's binade, or half the least subnormal
// step of the block's scale. A block holding NaN or inf decodes entirely to
// NaN, so divergence is never hidden. Sums of decoded values accumulate in
// float (decode_add); with error feedback (error_feedback.hpp) what one
// round loses is sent in the next.
//
// Portable code only: the per-element rounding is integer work the
// compiler vectorises well enough for pseudo-gradients sent once a round.
// Device kernels: cuda/kernels.cuh, the same element functions.
#pragma once

#include <chorus/codec/blocks.hpp>
#include <chorus/codec/codec.hpp>
#include <chorus/codec/elements.hpp>
#include <chorus/codec/simd_kernels.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string_view>

namespace chorus::codec {

namespace detail {

template <std::size_t Bits>
struct minifloat_payload {  // per block: the scale byte, then the codes, Bits each (low nibble first)
  static constexpr std::size_t header_bytes = 1;
  static std::size_t payload_bytes(std::size_t elements) { return (elements * Bits + 7) / 8; }
};

template <element::minifloat_format F>
inline constexpr std::size_t code_bits = F.exponent_bits + F.mantissa_bits + 1 <= 4 ? 4 : 8;

template <class Derived, element::minifloat_format F>
class minifloat_codec : public block_codec<Derived, minifloat_payload<code_bits<F>>> {
  using base = block_codec<Derived, minifloat_payload<code_bits<F>>>;

 public:
  static constexpr std::size_t default_block = 32;
  static constexpr element::minifloat_format format = F;
  static constexpr bool device_kernels = true;  // cuda/kernels.cuh has them: a codec_spec names it (spec.hpp)

  explicit minifloat_codec(std::size_t block = default_block) : base(block, simd_path::portable) {}

  void error_bound(std::span<const float> in, std::span<float> bound) const {
    this->for_each_block(in.size(), [&](std::size_t first, std::size_t n) {
      const std::uint8_t scale = scale_of(in.data() + first, n);
      const float floor = element::power_of_two(static_cast<int>(scale) - 127 - F.bias - F.mantissa_bits);
      const float relative = element::power_of_two(-(F.mantissa_bits + 1));
      for (std::size_t i = first; i < first + n; ++i)
        bound[i] = scale == element::minifloat_nan_block
                       ? std::numeric_limits<float>::infinity()
                       // rounded up a little: |x| 2^-(m+1) may lose its last bits below float's normal range
                       : std::max(std::fabs(in[i]) * relative * (1.0f + 0x1p-20f), floor) +
                             std::numeric_limits<float>::denorm_min();
    });
  }

 private:
  friend base;
  static constexpr bool nibbles = code_bits<F> == 4;

  static std::uint8_t scale_of(const float* x, std::size_t n) {
    float largest = 0.0f;
    for (std::size_t i = 0; i < n; ++i) largest = hd::larger(largest, element::int8_magnitude(x[i]));
    return element::minifloat_scale_byte(largest, F);
  }

  void encode_block(const float* x, std::size_t n, std::byte* out) const {
    const std::uint8_t scale = scale_of(x, n);
    out[0] = std::byte{scale};
    auto* codes = reinterpret_cast<std::uint8_t*>(out + 1);
    if constexpr (nibbles) {
      for (std::size_t i = 0; i < n; i += 2) {
        const std::uint8_t low = element::minifloat_encode(x[i], scale, F);
        const std::uint8_t high = i + 1 < n ? element::minifloat_encode(x[i + 1], scale, F) : 0;
        codes[i / 2] = static_cast<std::uint8_t>(low | high << 4);
      }
    } else {
      for (std::size_t i = 0; i < n; ++i) codes[i] = element::minifloat_encode(x[i], scale, F);
    }
  }

  template <bool Accumulate>
  void decode_block(const std::byte* in, float* out, std::size_t n) const {
    const auto scale = std::to_integer<std::uint8_t>(in[0]);
    const auto* codes = reinterpret_cast<const std::uint8_t*>(in + 1);
    for (std::size_t i = 0; i < n; ++i)
      element::decoded_into<Accumulate>(out[i], element::minifloat_decode(code_at(codes, i), scale, F));
  }

  static std::uint32_t code_at(const std::uint8_t* codes, std::size_t i) {
    if constexpr (nibbles)
      return (codes[i / 2] >> (4 * (i % 2))) & 0xfu;
    else
      return codes[i];
  }
};

}  // namespace detail

class fp8_e4m3 : public detail::minifloat_codec<fp8_e4m3, element::e4m3> {
 public:
  static constexpr std::string_view name = "fp8_e4m3";
  using minifloat_codec::minifloat_codec;
};

class fp8_e5m2 : public detail::minifloat_codec<fp8_e5m2, element::e5m2> {
 public:
  static constexpr std::string_view name = "fp8_e5m2";
  using minifloat_codec::minifloat_codec;
};

class fp4_e2m1 : public detail::minifloat_codec<fp4_e2m1, element::e2m1> {
 public:
  static constexpr std::string_view name = "fp4_e2m1";
  using minifloat_codec::minifloat_codec;
};

}  // namespace chorus::codec
