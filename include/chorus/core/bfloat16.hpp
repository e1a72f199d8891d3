// bfloat16: the top 16 bits of an IEEE binary32 (1 sign, 8 exponent, 7
// mantissa bits). Same range as float, 8 bits of precision.
//
// Conversion from float rounds to nearest, ties to even; overflow rounds to
// infinity like any IEEE narrowing; NaN stays NaN (quiet bit forced, so a
// signalling NaN whose payload lives only in the low bits cannot turn into
// infinity). Subnormals round like normals. Conversion to float is exact.
#pragma once

#include <chorus/core/host_device.hpp>

#include <cstdint>

namespace chorus {

namespace detail {

CHORUS_HD constexpr std::uint16_t float_bits_to_bfloat16_bits(std::uint32_t f) noexcept {
  if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<std::uint16_t>((f >> 16) | 0x0040u);
  const std::uint32_t odd = (f >> 16) & 1u;
  return static_cast<std::uint16_t>((f + 0x7fffu + odd) >> 16);
}

}  // namespace detail

class bfloat16 {
 public:
  constexpr bfloat16() noexcept = default;
  CHORUS_HD constexpr explicit bfloat16(float value) noexcept
      : bits_(detail::float_bits_to_bfloat16_bits(hd::bits_of(value))) {}

  CHORUS_HD static constexpr bfloat16 from_bits(std::uint16_t bits) noexcept {
    bfloat16 b;
    b.bits_ = bits;
    return b;
  }

  CHORUS_HD constexpr std::uint16_t bits() const noexcept { return bits_; }
  CHORUS_HD constexpr operator float() const noexcept {
    return hd::float_from_bits(static_cast<std::uint32_t>(bits_) << 16);
  }

  CHORUS_HD constexpr bool is_nan() const noexcept { return (bits_ & 0x7f80u) == 0x7f80u && (bits_ & 0x7fu) != 0; }

 private:
  std::uint16_t bits_ = 0;
};

static_assert(sizeof(bfloat16) == 2);

}  // namespace chorus
