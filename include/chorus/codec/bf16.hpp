// bf16 codec: bfloat16 (float's top 16 bits), 2 bytes per element, round to
// nearest even.
//
// Error: |decoded - x| <= max(|x| 2^-8, 2^-134) (half an ulp; 2^-134 is half
// the smallest bfloat16 subnormal). Same range as float, so overflow happens
// only when rounding up past 3.3895e38; the policy (two_byte_float.hpp)
// saturates there by default. Three more bits of exponent than fp16 and three
// fewer of mantissa: no pre-scaling needed, 8x the rounding error.
#pragma once

#include <chorus/codec/two_byte_float.hpp>
#include <chorus/core/bfloat16.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

namespace chorus::codec {

struct bf16_format {
  static constexpr std::string_view name = "bf16";
  static constexpr std::uint16_t largest_bits = element::bf16_largest_bits;

  static constexpr std::uint16_t encode(float x, overflow policy) { return element::bf16_encode(x, policy); }
  static constexpr float decode(std::uint16_t bits) { return element::bf16_decode(bits); }

  static float bound(float x, overflow policy) {
    if (!std::isfinite(x)) return 0.0f;
    const float magnitude = std::fabs(x);
    const float largest = decode(largest_bits);
    if (magnitude > largest)
      return policy == overflow::saturate ? magnitude - largest : std::numeric_limits<float>::infinity();
    return std::max(magnitude * 0x1p-8f, 0x1p-134f);
  }

#if CHORUS_CODEC_X86
  // Saturation clamps finite magnitudes to the largest float that rounds to
  // 0x7f7f; inf and NaN (magnitude bits above 0x7f7fffff) bypass rounding,
  // NaN with its quiet bit set.
  template <overflow Policy>
  CHORUS_TARGET_AVX2 static __m256i encode8_bits(const float* in) {
    const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in));
    const __m256i magnitude = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
    __m256i v = u;
    if constexpr (Policy == overflow::saturate)
      v = _mm256_or_si256(_mm256_min_epi32(magnitude, _mm256_set1_epi32(0x7f7f7fff)), _mm256_xor_si256(u, magnitude));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(v, 16), _mm256_set1_epi32(1));
    const __m256i rounded =
        _mm256_srli_epi32(_mm256_add_epi32(_mm256_add_epi32(v, _mm256_set1_epi32(0x7fff)), odd), 16);
    const __m256i special = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f7fffff));
    const __m256i quiet =
        _mm256_and_si256(_mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7f800000)), _mm256_set1_epi32(0x40));
    return _mm256_blendv_epi8(rounded, _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet), special);
  }
  // 16 at a time: packus works within 128-bit lanes, the permute restores order.
  template <overflow Policy>
  CHORUS_TARGET_AVX2 static void encode16(const float* in, std::uint16_t* out) {
    const __m256i packed = _mm256_packus_epi32(encode8_bits<Policy>(in), encode8_bits<Policy>(in + 8));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permute4x64_epi64(packed, 0xd8));
  }
  template <overflow Policy>
  CHORUS_TARGET_AVX2 static void encode8(const float* in, std::uint16_t* out) {
    const __m256i bits = encode8_bits<Policy>(in);
    const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(bits), _mm256_extracti128_si256(bits, 1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), packed);
  }
  CHORUS_TARGET_AVX2 static __m256 decode8(const std::uint16_t* in) {
    const __m256i wide = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(wide, 16));
  }
#endif
};

class bf16 : public detail::two_byte_float<bf16_format> {
 public:
  static constexpr std::string_view name = bf16_format::name;
  using two_byte_float::two_byte_float;
};

template <>
inline constexpr bool reencodes_well<bf16> = true;

}  // namespace chorus::codec
