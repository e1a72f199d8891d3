// IEEE 754 binary16 ("half"): 1 sign, 5 exponent, 10 mantissa bits.
//
// Conversion from float rounds to nearest, ties to even, exactly as the F16C
// instruction VCVTPS2PH does with rounding mode 0: values of 65520 and above
// (the midpoint to the next power of two) become infinity, values below the
// smallest subnormal's half become zero, NaN stays NaN (quiet, top payload
// bits kept). Conversion to float is exact.
#pragma once

#include <chorus/core/host_device.hpp>

#include <cstdint>

namespace chorus {

namespace detail {

CHORUS_HD constexpr std::uint16_t float_bits_to_half_bits(std::uint32_t f) noexcept {
  const auto sign = static_cast<std::uint16_t>((f >> 16) & 0x8000u);
  const std::uint32_t magnitude = f & 0x7fffffffu;
  if (magnitude > 0x7f800000u)  // NaN: keep the payload's top bits, force quiet
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  if (magnitude >= 0x477ff000u)  // >= 65520 rounds to infinity (and inf stays inf)
    return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {  // normal half: rebias exponent 127 -> 15
    const std::uint32_t odd = (magnitude >> 13) & 1u;
    const std::uint32_t rounded = magnitude + 0xfffu + odd;  // RNE on 13 dropped bits
    return static_cast<std::uint16_t>(sign | ((rounded - (112u << 23)) >> 13));
  }
  if (magnitude <= 0x33000000u)  // <= 2^-25: the tie at 2^-25 goes to even (zero)
    return sign;
  // Subnormal half: count units of 2^-24. The result may carry into the
  // smallest normal (0x0400), which is the right encoding.
  const std::uint32_t exponent = magnitude >> 23;
  const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126u - exponent;  // 14..24
  std::uint32_t units = mantissa >> shift;
  const std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
  const std::uint32_t halfway = 1u << (shift - 1u);
  if (remainder > halfway || (remainder == halfway && (units & 1u))) ++units;
  return static_cast<std::uint16_t>(sign | units);
}

CHORUS_HD constexpr std::uint32_t half_bits_to_float_bits(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) return sign | 0x7f800000u | (mantissa << 13);  // inf, NaN
  if (exponent != 0) return sign | ((exponent + 112u) << 23) | (mantissa << 13);
  if (mantissa == 0) return sign;
  std::uint32_t float_exponent = 113;  // subnormal: normalise into a float
  while ((mantissa & 0x400u) == 0) {
    mantissa <<= 1;
    --float_exponent;
  }
  return sign | (float_exponent << 23) | ((mantissa & 0x3ffu) << 13);
}

}  // namespace detail

class half {
 public:
  constexpr half() noexcept = default;
  CHORUS_HD constexpr explicit half(float value) noexcept
      : bits_(detail::float_bits_to_half_bits(hd::bits_of(value))) {}

  CHORUS_HD static constexpr half from_bits(std::uint16_t bits) noexcept {
    half h;
    h.bits_ = bits;
    return h;
  }

  CHORUS_HD constexpr std::uint16_t bits() const noexcept { return bits_; }
  CHORUS_HD constexpr operator float() const noexcept {
    return hd::float_from_bits(detail::half_bits_to_float_bits(bits_));
  }

  CHORUS_HD constexpr bool is_nan() const noexcept { return (bits_ & 0x7c00u) == 0x7c00u && (bits_ & 0x3ffu) != 0; }

 private:
  std::uint16_t bits_ = 0;
};

static_assert(sizeof(half) == 2);

}  // namespace chorus
