// The codecs' arithmetic on one element (and one block codec's header),
// written once for the CPU codecs (fp16.hpp, bf16.hpp, int8.hpp, onebit.hpp,
// minifloat.hpp, error_feedback.hpp) and the device kernels (cuda/kernels.cuh). The CPU
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

// --- fp8 and fp4: small floats under a power-of-two scale per block --------
//
// A code is a sign bit over `exponent_bits` of exponent (biased by `bias`)
// and `mantissa_bits` of mantissa, with subnormals where the exponent field
// is 0 and no infinity or NaN: the block's scale carries the range, and a
// block holding NaN or inf says so in its scale byte and decodes to NaN.
// e4m3's codes are OCP's e4m3fn values (its NaN code, 0x7f, is never written).
struct minifloat_format {
  int exponent_bits, mantissa_bits, bias;
  std::uint8_t largest;  // the largest finite magnitude's code
};
inline constexpr minifloat_format e4m3{4, 3, 7, 0x7e};   // 448
inline constexpr minifloat_format e5m2{5, 2, 15, 0x7b};  // 57344
inline constexpr minifloat_format e2m1{2, 1, 1, 0x7};    // 6

// A block's scale is 2^k, sent as the byte k + 127 (k in [-127, 126]); 255
// marks a block that held NaN or inf.
inline constexpr std::uint8_t minifloat_nan_block = 255;
inline constexpr int minifloat_least_k = -127;

// 2^k as a float, k in [-149, 127] (exact).
CHORUS_HD constexpr float power_of_two(int k) noexcept {
  if (k >= -126) return hd::float_from_bits(static_cast<std::uint32_t>(k + 127) << 23);
  return hd::float_from_bits(1u << (k + 149));
}

// A finite positive float as significand x 2^exponent, the significand's
// leading 1 at bit 23 (subnormals normalised).
struct binade {
  int exponent;
  std::uint32_t significand;
};
CHORUS_HD constexpr binade binade_of(std::uint32_t magnitude_bits) noexcept {
  const int field = static_cast<int>(magnitude_bits >> 23);
  std::uint32_t significand = magnitude_bits & 0x7fffffu;
  if (field != 0) return {field - 127, significand | 0x800000u};
  int exponent = -126;
  while ((significand & 0x800000u) == 0) {
    significand <<= 1;
    --exponent;
  }
  return {exponent, significand};
}

// A magnitude code's value (exact).
CHORUS_HD constexpr float minifloat_value(std::uint32_t magnitude_code, minifloat_format f) noexcept {
  const auto field = static_cast<int>(magnitude_code >> f.mantissa_bits);
  const std::uint32_t mantissa = magnitude_code & ((1u << f.mantissa_bits) - 1u);
  if (field == 0) return static_cast<float>(mantissa) * power_of_two(1 - f.bias - f.mantissa_bits);
  return hd::float_from_bits(static_cast<std::uint32_t>(field - f.bias + 127) << 23 |
                             mantissa << (23 - f.mantissa_bits));
}

// The scale byte of a block whose largest magnitude is `largest` (as
// int8_magnitude takes it): the least k >= -127 with largest <= the
// format's largest x 2^k, so that no element saturates.
CHORUS_HD constexpr std::uint8_t minifloat_scale_byte(float largest, minifloat_format f) noexcept {
  if (!hd::is_finite(largest)) return minifloat_nan_block;
  if (largest == 0.0f) return 0;
  const binade block = binade_of(hd::bits_of(largest));
  const binade top = binade_of(hd::bits_of(minifloat_value(f.largest, f)));
  const int k = block.exponent - top.exponent + (block.significand > top.significand ? 1 : 0);
  return static_cast<std::uint8_t>((k < minifloat_least_k ? minifloat_least_k : k) + 127);
}

// |y| (its float bits, at most the format's largest) rounded to the nearest
// magnitude code, ties to even: fp16's conversion (core/half.hpp) for any
// exponent and mantissa width.
CHORUS_HD constexpr std::uint32_t minifloat_magnitude_code(std::uint32_t magnitude, minifloat_format f) noexcept {
  const auto drop = static_cast<std::uint32_t>(23 - f.mantissa_bits);
  if (magnitude >= static_cast<std::uint32_t>(128 - f.bias) << 23) {  // >= 2^(1 - bias): normal
    const std::uint32_t rounded = magnitude + ((1u << (drop - 1u)) - 1u) + ((magnitude >> drop) & 1u);
    return (rounded - (static_cast<std::uint32_t>(127 - f.bias) << 23)) >> drop;
  }
  // At most half the least subnormal, 2^(-bias - mantissa_bits): zero (the tie goes to even).
  if (magnitude <= static_cast<std::uint32_t>(127 - f.bias - f.mantissa_bits) << 23) return 0;
  // Subnormal: units of 2^(1 - bias - mantissa_bits); a carry makes the least normal, as it should.
  const std::uint32_t exponent = magnitude >> 23;
  const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = static_cast<std::uint32_t>(151 - f.bias - f.mantissa_bits) - exponent;
  std::uint32_t units = significand >> shift;
  const std::uint32_t remainder = significand & ((1u << shift) - 1u), halfway = 1u << (shift - 1u);
  if (remainder > halfway || (remainder == halfway && (units & 1u))) ++units;
  return units;
}

// x's code in its block (x finite, |x| at most the block's largest): x 2^-k
// is exact, being at most the format's largest, or far below its least
// subnormal where float loses bits; so the code is x 2^-k rounded once.
CHORUS_HD inline std::uint8_t minifloat_encode(float x, std::uint8_t scale_byte, minifloat_format f) noexcept {
  if (scale_byte == minifloat_nan_block) return 0;
  const std::uint32_t bits = hd::bits_of(hd::multiply(x, power_of_two(127 - static_cast<int>(scale_byte))));
  const std::uint32_t sign = (bits >> 31) << (f.exponent_bits + f.mantissa_bits);
  return static_cast<std::uint8_t>(sign | minifloat_magnitude_code(bits & 0x7fffffffu, f));
}

// A code's value times 2^k (exact, but for the top codes of a block near
// float's largest, which would round past it and come back as the largest
// float: still the nearer of the two).
CHORUS_HD inline float minifloat_decode(std::uint32_t code, std::uint8_t scale_byte, minifloat_format f) noexcept {
  if (scale_byte == minifloat_nan_block) return hd::quiet_nan();
  const int sign_bit = f.exponent_bits + f.mantissa_bits;
  const float scaled = hd::multiply(minifloat_value(code & ((1u << sign_bit) - 1u), f),
                                    power_of_two(static_cast<int>(scale_byte) - 127));
  const float magnitude = hd::is_finite(scaled) ? scaled : hd::float_from_bits(0x7f7fffffu);
  return (code >> sign_bit) & 1u ? -magnitude : magnitude;
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
