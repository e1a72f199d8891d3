// int8 codec: blocks of `block` elements (default 256), each sent as one float
// scale = max|x| / 127 followed by q = round_to_nearest_even(x / scale) in
// [-127, 127], one signed byte per element. 4 + block bytes per block:
// 3.94x smaller than float at the default block size.
//
// Error: |decoded - x| <= scale / 2 + max|x| 2^-20 (half a quantisation step,
// plus float rounding of the scale), with max|x| taken over x's block. A block
// holding NaN or inf decodes entirely to NaN, so divergence is never hidden.
//
// Re-encoding a partial sum adds a fresh error of that size each time, so
// compressed collectives encode each contribution once (compressed/).
#pragma once

#include <chorus/codec/blocks.hpp>
#include <chorus/codec/codec.hpp>
#include <chorus/codec/simd.hpp>

#include <algorithm>
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
  static constexpr std::size_t default_block = 256;

  explicit int8(std::size_t block = default_block, simd_path path = best_path()) : block_codec(block, path) {}

  void error_bound(std::span<const float> in, std::span<float> bound) const {
    for_each_block(in.size(), [&](std::size_t first, std::size_t n) {
      const block_scale s = scale_of(in.data() + first, n);
      const float b = std::isfinite(s.scale) ? s.scale * 0.5f + s.largest * 0x1p-20f : std::numeric_limits<float>::infinity();
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
    if (s.inverse == 0.0f) std::fill_n(q, n, std::int8_t{0});  // all zero, or poisoned by NaN/inf
    else quantize(x, q, n, s.inverse);
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

  struct block_scale {
    float scale, inverse, largest;
  };

  block_scale scale_of(const float* x, std::size_t n) const {
    float largest = 0.0f;
    bool finite = true;
    std::size_t i = 0;
#if CHORUS_CODEC_X86
    if (path_ == simd_path::avx2) i = largest_magnitude_avx2(x, n, largest, finite);
#endif
    for (; i < n; ++i) {
      const float magnitude = std::fabs(x[i]);
      finite = finite && magnitude < std::numeric_limits<float>::infinity();
      largest = std::max(largest, magnitude);
    }
    if (!finite) return {std::numeric_limits<float>::quiet_NaN(), 0.0f, largest};
    return {largest / 127.0f, largest > 0.0f ? 127.0f / largest : 0.0f, largest};
  }

  void quantize(const float* x, std::int8_t* q, std::size_t n, float inverse) const {
    std::size_t i = 0;
#if CHORUS_CODEC_X86
    if (path_ == simd_path::avx2) i = quantize_avx2(x, q, n, inverse);
#endif
    for (; i < n; ++i) q[i] = static_cast<std::int8_t>(std::clamp(std::nearbyint(x[i] * inverse), -127.0f, 127.0f));
  }

  template <bool Accumulate>
  CHORUS_NO_FMA_CONTRACT static void dequantize_portable(const std::int8_t* q, float* out, std::size_t i, std::size_t n,
                                                         float scale) {
    CHORUS_NO_FMA_CONTRACT_BODY
    for (; i < n; ++i) {
      const float value = static_cast<float>(q[i]) * scale;
      if constexpr (Accumulate) out[i] += value;
      else out[i] = value;
    }
  }

#if CHORUS_CODEC_X86
  CHORUS_TARGET_AVX2 static std::size_t largest_magnitude_avx2(const float* x, std::size_t n, float& largest,
                                                               bool& finite) {
    __m256 most = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    const __m256 sign = _mm256_set1_ps(-0.0f), inf = _mm256_set1_ps(std::numeric_limits<float>::infinity());
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 magnitude = _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i));
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(magnitude, inf, _CMP_NLT_UQ));  // NaN or inf
      most = _mm256_max_ps(most, magnitude);
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, most);
    for (float lane : lanes) largest = std::max(largest, lane);
    finite = _mm256_movemask_ps(bad) == 0;
    return i;
  }

  CHORUS_TARGET_AVX2 static std::size_t quantize_avx2(const float* x, std::int8_t* q, std::size_t n, float inverse) {
    const __m256 scale = _mm256_set1_ps(inverse), low = _mm256_set1_ps(-127.0f), high = _mm256_set1_ps(127.0f);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 scaled = _mm256_mul_ps(_mm256_loadu_ps(x + i), scale);
      const __m256 rounded = _mm256_round_ps(scaled, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      const __m256i whole = _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(rounded, low), high));
      const __m256i words = _mm256_packs_epi32(whole, whole);  // per 128-bit lane
      const __m256i bytes = _mm256_packs_epi16(words, words);
      const std::int32_t first = _mm_cvtsi128_si32(_mm256_castsi256_si128(bytes));
      const std::int32_t second = _mm_cvtsi128_si32(_mm256_extracti128_si256(bytes, 1));
      std::memcpy(q + i, &first, 4);
      std::memcpy(q + i + 4, &second, 4);
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
