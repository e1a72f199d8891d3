// The codecs' arithmetic on one element (and one int8/onebit block header),
// written once for the CPU codecs (fp16.hpp, bf16.hpp, int8.hpp, onebit.hpp,
// error_feedback.hpp) and the device kernels (cuda/kernels.cuh). The CPU
// codec tests pin these bits; the kernels must give the same ones.
//
// The AVX2 paths of the CPU codecs are separate code with the same bits,
// tested against the portable loops that call these functions.
#pragma once

#include <chorus/core/bfloat16.hpp>
#include <chorus/core/half.hpp>
#include <chorus/core/host_device.hpp>

#include <cstddef>
#include <cstdint>

namespace chorus::codec {

// What a two-byte codec does with a finite value beyond its range:
// saturate to the largest finite value (default) or round to infinity (IEEE).
enum class overflow { saturate, infinity };

namespace element {

// --- fp16 and bf16: one element to two bytes and back -----------------------

inline constexpr float fp16_largest = 65504.0f;
inline constexpr std::uint16_t bf16_largest_bits = 0x7f7f, bf16_infinity_bits = 0x7f80;

CHORUS_HD constexpr std::uint16_t fp16_encode(float x, overflow policy) noexcept {
  if (policy == overflow::saturate && hd::is_finite(x) && hd::magnitude(x) > fp16_largest)
    x = hd::with_sign_of(fp16_largest, x);
  return chorus::detail::float_bits_to_half_bits(hd::bits_of(x));
}
CHORUS_HD constexpr float fp16_decode(std::uint16_t bits) noexcept {
  return hd::float_from_bits(chorus::detail::half_bits_to_float_bits(bits));
}

// Saturation: a finite value that rounds to infinity becomes the largest
// finite bfloat16 with its sign.
CHORUS_HD constexpr std::uint16_t bf16_encode(float x, overflow policy) noexcept {
  const std::uint16_t bits = chorus::detail::float_bits_to_bfloat16_bits(hd::bits_of(x));
  if (policy == overflow::saturate && hd::is_finite(x) && (bits & 0x7fffu) == bf16_infinity_bits)
    return static_cast<std::uint16_t>((bits & 0x8000u) | bf16_largest_bits);
  return bits;
}
CHORUS_HD constexpr float bf16_decode(std::uint16_t bits) noexcept {
  return hd::float_from_bits(static_cast<std::uint32_t>(bits) << 16);
}

// --- int8: a float scale per block, one signed byte per element ------------

// boost: a power of two applied before `inverse`, 1 except in blocks so small
// (largest < 2^-100) that 127 / largest would overflow; multiplying by it is
// exact, so every block quantises x * 127 / largest the same way.
struct int8_scale {
  float scale, inverse, largest, boost;
};

inline constexpr float int8_tiny_block = 0x1p-100f, int8_tiny_boost = 0x1p100f;

// What the block's largest magnitude is taken over: |x|, or infinity for
// NaN and inf. Its maximum does not depend on the order it is taken in.
CHORUS_HD constexpr float int8_magnitude(float x) noexcept {
  return hd::is_finite(x) ? hd::magnitude(x) : hd::infinity();
}

// scale = largest / 127 (NaN for a block holding NaN or inf, which then
// decodes to NaN); inverse 0 means every byte is 0.
CHORUS_HD inline int8_scale int8_scale_of(float largest) noexcept {
  if (!hd::is_finite(largest)) return {hd::quiet_nan(), 0.0f, largest, 1.0f};
  if (largest == 0.0f) return {0.0f, 0.0f, 0.0f, 1.0f};
  const float boost = largest < int8_tiny_block ? int8_tiny_boost : 1.0f;
  return {hd::divide(largest, 127.0f), hd::divide(127.0f, hd::multiply(largest, boost)), largest, boost};
}

CHORUS_HD inline std::int8_t int8_quantize(float x, const int8_scale& s) noexcept {
  if (s.inverse == 0.0f) return 0;
  const float scaled = hd::multiply(hd::multiply(x, s.boost), s.inverse);
  return static_cast<std::int8_t>(hd::clamp(hd::round_to_even(scaled), -127.0f, 127.0f));
}

CHORUS_HD inline float int8_dequantize(std::int8_t q, float scale) noexcept {
  return hd::multiply(static_cast<float>(q), scale);
}

// --- onebit: two group means per block, one sign bit per element -----------

// Element k of a block adds to lane k % 8 of its group (and 0 to the other
// group's lane); a group's sum is its 8 lanes added pairwise.
inline constexpr std::size_t onebit_lanes = 8;

CHORUS_HD constexpr bool onebit_positive(float x) noexcept { return x >= 0.0f; }

// The mean of a group from its lane sums; a NaN sum gives one canonical NaN
// (which NaN an addition of two returns depends on operand order).
CHORUS_HD inline float onebit_mean(const float* lane, std::size_t count) noexcept {
  if (count == 0) return 0.0f;
  const float sum = hd::add(hd::add(hd::add(lane[0], lane[1]), hd::add(lane[2], lane[3])),
                            hd::add(hd::add(lane[4], lane[5]), hd::add(lane[6], lane[7])));
  if (hd::is_nan(sum)) return hd::quiet_nan();
  return hd::divide(sum, static_cast<float>(count));
}

CHORUS_HD constexpr float onebit_value(const std::uint8_t* signs, std::size_t i, float positive_mean,
                                       float negative_mean) noexcept {
  return (signs[i / 8] >> (i % 8)) & 1u ? positive_mean : negative_mean;
}

// --- decoding and error feedback --------------------------------------------

// decode writes the value; decode_add adds it to what is there.
template <bool Accumulate>
CHORUS_HD inline void decoded_into(float& out, float value) noexcept {
  if constexpr (Accumulate)
    out = hd::add(out, value);
  else
    out = value;
}

// Error feedback encodes value + residual and keeps what decoding lost.
CHORUS_HD inline float with_residual(float value, float residual) noexcept { return hd::add(value, residual); }
CHORUS_HD inline float lost(float encoded, float decoded) noexcept { return hd::subtract(encoded, decoded); }

}  // namespace element

}  // namespace chorus::codec
