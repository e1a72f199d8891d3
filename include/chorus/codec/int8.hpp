// int8 codec: blocks of `block` elements (default 256), each sent as one float
// scale = max|x| / 127 followed by q = round_to_nearest_even(x / scale) in
// [-127, 127], one signed byte per element. 4 + block bytes per block:
// 3.94x smaller than float at the default block size.
//
// Error: |decoded - x| <= scale / 2 + max|x| 2^-20 + 2^-142 (half a
// quantisation step, float rounding of the scale, and an absolute floor for
// blocks so small that the scale is subnormal), with max|x| taken over x's
// block. A block
// holding NaN or inf decodes entirely to NaN, so divergence is never hidden.
//
// Re-encoding a partial sum adds a fresh error of that size each time, so
// compressed collectives encode each contribution once (compressed/).
#pragma once

#include <chorus/codec/blocks.hpp>
#include <chorus/codec/codec.hpp>
#include <chorus/codec/elements.hpp>
#include <chorus/codec/simd_kernels.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>

namespace chorus::codec {

namespace detail {

struct int8_payload {  // per block: float scale, then one signed byte per element
  static constexpr std::size_t header_bytes = sizeof(float);
  static std::size_t payload_bytes(std::size_t elements) { return elements; }
};

}  // namespace detail

class int8 : public detail::block_codec<int8, detail::int8_payload> {
 public:
  static constexpr std::string_view name = "int8";
  static constexpr bool device_kernels = true;  // cuda/kernels.cuh has them: a codec_spec names it (spec.hpp)
  static constexpr std::size_t default_block = 256;

  explicit int8(std::size_t block = default_block, simd_path path = best_path()) : block_codec(block, path) {}

  void error_bound(std::span<const float> in, std::span<float> bound) const {
    for_each_block(in.size(), [&](std::size_t first, std::size_t n) {
      const block_scale s = scale_of(in.data() + first, n);
      const float b = std::isfinite(s.scale) ? s.scale * 0.5f + s.largest * 0x1p-20f + 0x1p-142f
                                             : std::numeric_limits<float>::infinity();
      std::fill_n(bound.data() + first, n, b);
    });
  }

 private:
  friend block_codec;
  using payload = detail::int8_payload;

  void encode_block(const float* x, std::size_t n, std::byte* out) const {
    const block_scale s = scale_of(x, n);
    std::memcpy(out, &s.scale, sizeof(float));
    auto* q = reinterpret_cast<std::int8_t*>(out + payload::header_bytes);
    quantize(x, q, n, s);
  }

  template <bool Accumulate>
  void decode_block(const std::byte* in, float* out, std::size_t n) const {
    float scale;
    std::memcpy(&scale, in, sizeof(float));
    const auto* q = reinterpret_cast<const std::int8_t*>(in + payload::header_bytes);
    std::size_t i = 0;
#if CHORUS_CODEC_X86
    if (path_ == simd_path::avx2) i = dequantize_avx2<Accumulate>(q, out, n, scale);
#endif
    dequantize_portable<Accumulate>(q, out, i, n, scale);
  }

  using block_scale = element::int8_scale;

  block_scale scale_of(const float* x, std::size_t n) const {
    float largest = 0.0f;
    std::size_t i = 0;
#if CHORUS_CODEC_X86
    if (path_ == simd_path::avx2) i = largest_magnitude_avx2(x, n, largest);
#endif
    for (; i < n; ++i) largest = hd::larger(largest, element::int8_magnitude(x[i]));
    return element::int8_scale_of(largest);
  }

  void quantize(const float* x, std::int8_t* q, std::size_t n, const block_scale& s) const {
    std::size_t i = 0;
#if CHORUS_CODEC_X86
    if (path_ == simd_path::avx2 && s.boost == 1.0f && s.inverse != 0.0f) i = quantize_avx2(x, q, n, s.inverse);
#endif
    for (; i < n; ++i) q[i] = element::int8_quantize(x[i], s);
  }

  template <bool Accumulate>
  CHORUS_NO_FMA_CONTRACT static void dequantize_portable(const std::int8_t* q, float* out, std::size_t i, std::size_t n,
                                                         float scale) {
    CHORUS_NO_FMA_CONTRACT_BODY
    for (; i < n; ++i) element::decoded_into<Accumulate>(out[i], element::int8_dequantize(q[i], scale));
  }

#if CHORUS_CODEC_X86
  // The largest magnitude as the largest integer of the sign-cleared bits:
  // non-negative floats order like their bits, and NaN and inf (bits >= inf's)
  // come out as "not finite". 32 elements per step, in four independent maxima.
  CHORUS_TARGET_AVX2 static __m256i magnitude_bits8_avx2(const float* x) {
    return _mm256_and_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)), _mm256_set1_epi32(0x7fffffff));
  }

  CHORUS_TARGET_AVX2 static std::size_t largest_magnitude_avx2(const float* x, std::size_t n, float& largest) {
    __m256i most0 = _mm256_setzero_si256(), most1 = most0, most2 = most0, most3 = most0;
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      most0 = _mm256_max_epi32(most0, magnitude_bits8_avx2(x + i));
      most1 = _mm256_max_epi32(most1, magnitude_bits8_avx2(x + i + 8));
      most2 = _mm256_max_epi32(most2, magnitude_bits8_avx2(x + i + 16));
      most3 = _mm256_max_epi32(most3, magnitude_bits8_avx2(x + i + 24));
    }
    for (; i + 8 <= n; i += 8) most0 = _mm256_max_epi32(most0, magnitude_bits8_avx2(x + i));
    const __m256i all = _mm256_max_epi32(_mm256_max_epi32(most0, most1), _mm256_max_epi32(most2, most3));
    __m128i half = _mm_max_epi32(_mm256_castsi256_si128(all), _mm256_extracti128_si256(all, 1));
    half = _mm_max_epi32(half, _mm_shuffle_epi32(half, 0x4e));
    half = _mm_max_epi32(half, _mm_shuffle_epi32(half, 0xb1));
    const std::int32_t bits = _mm_cvtsi128_si32(half);
    largest = bits >= 0x7f800000 ? std::numeric_limits<float>::infinity() : std::bit_cast<float>(bits);
    return i;
  }

  // Clamping before the conversion equals rounding first: +-127 are integers.
  // cvtps rounds to nearest even, as nearbyint does in the default mode.
  CHORUS_TARGET_AVX2 static __m256i quantize8_avx2(const float* x, __m256 inverse) {
    const __m256 low = _mm256_set1_ps(-127.0f), high = _mm256_set1_ps(127.0f);
    const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(x), inverse);
    return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(scaled, low), high));
  }

  CHORUS_TARGET_AVX2 static std::size_t quantize_avx2(const float* x, std::int8_t* q, std::size_t n, float inverse) {
    const __m256 factor = _mm256_set1_ps(inverse);
    // packs works within 128-bit lanes; this puts the four 8-byte groups back in order.
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    std::size_t i = 0;
    for (; i + 32 <= n; i += 32) {
      const __m256i low = _mm256_packs_epi32(quantize8_avx2(x + i, factor), quantize8_avx2(x + i + 8, factor));
      const __m256i high = _mm256_packs_epi32(quantize8_avx2(x + i + 16, factor), quantize8_avx2(x + i + 24, factor));
      const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(low, high), order);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), bytes);
    }
    for (; i + 8 <= n; i += 8) {
      const __m256i whole = quantize8_avx2(x + i, factor);
      const __m128i words = _mm_packs_epi32(_mm256_castsi256_si128(whole), _mm256_extracti128_si256(whole, 1));
      _mm_storel_epi64(reinterpret_cast<__m128i*>(q + i), _mm_packs_epi16(words, words));
    }
    return i;
  }

  template <bool Accumulate>
  CHORUS_TARGET_AVX2 static std::size_t dequantize_avx2(const std::int8_t* q, float* out, std::size_t n, float scale) {
    const __m256 factor = _mm256_set1_ps(scale);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m128i eight = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(q + i));
      __m256 value = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(eight)), factor);
      if constexpr (Accumulate) value = _mm256_add_ps(_mm256_loadu_ps(out + i), value);
      _mm256_storeu_ps(out + i, value);
    }
    return i;
  }
#endif
};

}  // namespace chorus::codec
