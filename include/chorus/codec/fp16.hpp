// fp16 codec: IEEE binary16, 2 bytes per element, round to nearest even.
//
// Error: |decoded - x| <= max(|x| 2^-11, 2^-25) for |x| <= 65504 (half an ulp;
// 2^-25 is half the smallest subnormal). Beyond 65504 the overflow policy
// decides (two_byte_float.hpp): saturate to +-65504 (default) or infinity.
// Sums of many gradients exceed that range easily: the compressed allreduce
// pre-divides by a power of two >= the rank count for fp16 (see
// compressed/compressed_allreduce.hpp). Vectorised with F16C (VCVTPS2PH / VCVTPH2PS).
#pragma once

#include <chorus/codec/two_byte_float.hpp>
#include <chorus/core/half.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

namespace chorus::codec {

struct fp16_format {
  static constexpr std::string_view name = "fp16";
  static constexpr float largest = element::fp16_largest;

  static constexpr std::uint16_t encode(float x, overflow policy) { return element::fp16_encode(x, policy); }
  static constexpr float decode(std::uint16_t bits) { return element::fp16_decode(bits); }

  static float bound(float x, overflow policy) {
    const float magnitude = std::fabs(x);
    if (!std::isfinite(x)) return 0.0f;
    if (magnitude >= 65520.0f)
      return policy == overflow::saturate ? magnitude - largest : std::numeric_limits<float>::infinity();
    return std::max(magnitude * 0x1p-11f, 0x1p-25f);
  }

#if CHORUS_CODEC_X86
  template <overflow Policy>
  CHORUS_TARGET_AVX2 static void encode8(const float* in, std::uint16_t* out) {
    __m256 x = _mm256_loadu_ps(in);
    if constexpr (Policy == overflow::saturate) {
      const __m256 magnitude = _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
      const __m256 finite =
          _mm256_cmp_ps(magnitude, _mm256_set1_ps(std::numeric_limits<float>::infinity()), _CMP_LT_OQ);
      const __m256 clamped = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-largest)), _mm256_set1_ps(largest));
      x = _mm256_blendv_ps(x, clamped, finite);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  template <overflow Policy>
  CHORUS_TARGET_AVX2 static void encode16(const float* in, std::uint16_t* out) {
    encode8<Policy>(in, out);
    encode8<Policy>(in + 8, out + 8);
  }
  CHORUS_TARGET_AVX2 static __m256 decode8(const std::uint16_t* in) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in)));
  }
#endif
};

class fp16 : public detail::two_byte_float<fp16_format> {
 public:
  static constexpr std::string_view name = fp16_format::name;
  using two_byte_float::two_byte_float;
};

template <>
inline constexpr bool limited_range<fp16> = true;

template <>
inline constexpr bool reencodes_well<fp16> = true;

}  // namespace chorus::codec
