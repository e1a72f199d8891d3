// onebit codec (1-bit SGD, Seide et al. 2014): blocks of `block` elements
// (default 256), each sent as two floats, the mean of its non-negative
// elements and the mean of its negative ones, followed by one sign bit per
// element (1: x >= 0). 8 + block/8 bytes per block: 25.6x smaller than float
// at the default block size.
//
// Decoding gives every element its group's mean, which keeps each group's
// sum (to float rounding) but not the elements: |decoded - x| <= (max - min)
// of x's group in its block, at most max|x| of the block. That error is
// large; it is meant to be used under error_feedback (error_feedback.hpp),
// which carries what was lost into the next step. A NaN joins the negative
// group and an inf the group of its sign: that group decodes to NaN or inf.
//
// Means come from 8 lane-wise partial sums added pairwise, on both the
// vector and the portable path, so both give the same bits.
#pragma once

#include <chorus/codec/blocks.hpp>
#include <chorus/codec/codec.hpp>
#include <chorus/codec/elements.hpp>
#include <chorus/codec/simd_kernels.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>

namespace chorus::codec {

namespace detail {

struct onebit_payload {  // per block: two float means, then one sign bit per element
  static constexpr std::size_t header_bytes = 2 * sizeof(float);
  static std::size_t payload_bytes(std::size_t elements) { return (elements + 7) / 8; }
};

}  // namespace detail

class onebit : public detail::block_codec<onebit, detail::onebit_payload> {
 public:
  static constexpr std::string_view name = "onebit";
  static constexpr bool device_kernels = true;  // cuda/kernels.cuh has them: a codec_spec names it (spec.hpp)
  static constexpr std::size_t default_block = 256;

  explicit onebit(std::size_t block = default_block, simd_path path = best_path()) : block_codec(block, path) {}

  void error_bound(std::span<const float> in, std::span<float> bound) const {
    for_each_block(in.size(), [&](std::size_t first, std::size_t n) {
      const std::span<const float> x = in.subspan(first, n);
      float low[2] = {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::infinity()};
      float high[2] = {-low[0], -low[0]};
      float largest = 0.0f;
      for (float v : x) {
        const int group = v >= 0.0f ? 0 : 1;
        low[group] = std::min(low[group], v);
        high[group] = std::max(high[group], v);
        largest = std::max(largest, std::fabs(v));
      }
      for (std::size_t k = 0; k < n; ++k) {
        const int group = x[k] >= 0.0f ? 0 : 1;
        bound[first + k] = (high[group] - low[group]) + largest * 0x1p-20f;
      }
    });
  }

  // A bound for any input whose magnitudes are at most `magnitudes`: the
  // group ranges are unknown, but never exceed the block's largest magnitude.
  void magnitude_bound(std::span<const float> magnitudes, std::span<float> bound) const {
    for_each_block(magnitudes.size(), [&](std::size_t first, std::size_t n) {
      float largest = 0.0f;
      for (std::size_t k = 0; k < n; ++k) largest = std::max(largest, magnitudes[first + k]);
      std::fill_n(bound.data() + first, n, largest * (1.0f + 0x1p-20f));
    });
  }

 private:
  friend block_codec;
  using payload = detail::onebit_payload;

  void encode_block(const float* x, std::size_t n, std::byte* out) const {
    auto* signs = reinterpret_cast<std::uint8_t*>(out + payload::header_bytes);
    std::memset(signs, 0, payload::payload_bytes(n));
    lanes sums{};
    std::size_t i = 0;
#if CHORUS_CODEC_X86
    if (path_ == simd_path::avx2) i = split_avx2(x, n, signs, sums);
#endif
    split_portable(x, i, n, signs, sums);
    const float means[2] = {mean(sums.positive, sums.positives), mean(sums.negative, n - sums.positives)};
    std::memcpy(out, means, sizeof means);
  }

  template <bool Accumulate>
  void decode_block(const std::byte* in, float* out, std::size_t n) const {
    float means[2];
    std::memcpy(means, in, sizeof means);
    const auto* signs = reinterpret_cast<const std::uint8_t*>(in + payload::header_bytes);
    std::size_t i = 0;
#if CHORUS_CODEC_X86
    if (path_ == simd_path::avx2) i = expand_avx2<Accumulate>(signs, means, out, n);
#endif
    for (; i < n; ++i) element::decoded_into<Accumulate>(out[i], element::onebit_value(signs, i, means[0], means[1]));
  }

  struct lanes {
    std::array<float, 8> positive, negative;
    std::size_t positives;  // elements >= 0
  };

  static float mean(const std::array<float, 8>& lane, std::size_t count) {
    return element::onebit_mean(lane.data(), count);
  }

  // Element k goes to lane k % 8, adding 0 to the other group's lane, exactly
  // as the vector code does.
  static void split_portable(const float* x, std::size_t i, std::size_t n, std::uint8_t* signs, lanes& sums) {
    for (; i < n; ++i) {
      const bool non_negative = element::onebit_positive(x[i]);
      sums.positive[i % 8] = hd::add(sums.positive[i % 8], non_negative ? x[i] : 0.0f);
      sums.negative[i % 8] = hd::add(sums.negative[i % 8], non_negative ? 0.0f : x[i]);
      sums.positives += non_negative ? 1u : 0u;
      signs[i / 8] = static_cast<std::uint8_t>(signs[i / 8] | (non_negative ? 1u << (i % 8) : 0u));
    }
  }

#if CHORUS_CODEC_X86
  CHORUS_TARGET_AVX2 static std::size_t split_avx2(const float* x, std::size_t n, std::uint8_t* signs, lanes& sums) {
    __m256 positive = _mm256_setzero_ps(), negative = _mm256_setzero_ps();
    const __m256 zero = _mm256_setzero_ps();
    std::size_t i = 0, positives = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256 v = _mm256_loadu_ps(x + i);
      const __m256 non_negative = _mm256_cmp_ps(v, zero, _CMP_GE_OQ);
      positive = _mm256_add_ps(positive, _mm256_and_ps(v, non_negative));
      negative = _mm256_add_ps(negative, _mm256_andnot_ps(non_negative, v));
      const auto mask = static_cast<unsigned>(_mm256_movemask_ps(non_negative));
      signs[i / 8] = static_cast<std::uint8_t>(mask);
      positives += static_cast<std::size_t>(_mm_popcnt_u32(mask));
    }
    _mm256_storeu_ps(sums.positive.data(), positive);
    _mm256_storeu_ps(sums.negative.data(), negative);
    sums.positives = positives;
    return i;
  }

  template <bool Accumulate>
  CHORUS_TARGET_AVX2 static std::size_t expand_avx2(const std::uint8_t* signs, const float* means, float* out,
                                                    std::size_t n) {
    const __m256i bit = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
    const __m256 positive = _mm256_set1_ps(means[0]), negative = _mm256_set1_ps(means[1]);
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const __m256i set = _mm256_and_si256(_mm256_set1_epi32(signs[i / 8]), bit);
      const __m256 chosen = _mm256_blendv_ps(negative, positive, _mm256_castsi256_ps(_mm256_cmpeq_epi32(set, bit)));
      __m256 value = chosen;
      if constexpr (Accumulate) value = _mm256_add_ps(_mm256_loadu_ps(out + i), chosen);
      _mm256_storeu_ps(out + i, value);
    }
    return i;
  }
#endif
};

}  // namespace chorus::codec
