// Arithmetic written once for the CPU and the GPU. CHORUS_HD marks a
// function that nvcc compiles for both (`__host__ __device__`); for g++ and
// clang it is nothing. The reductions (reduce_op.hpp), the half and bfloat16
// conversions and the codecs' element functions (codec/elements.hpp) are
// built from these, so the CPU tests pin the bits the device kernels
// (cuda/kernels.cuh) must give.
//
// Bit-identical results on both sides need care in three places:
// - no std::bit_cast or <cmath> calls, which are host-only for nvcc: the bit
//   helpers below use the compiler builtin both sides know;
// - no fused multiply-add: nvcc contracts a * b + c into an FMA by default,
//   the CPU code does not (see codec/simd_kernels.hpp), so products and sums that
//   meet go through multiply() and add(), which are never fused on device;
// - rounding to an integer is to nearest even on both sides.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define CHORUS_HD __host__ __device__
#else
#define CHORUS_HD
#endif

#if !defined(__CUDA_ARCH__)
#include <cmath>
#endif

namespace chorus::hd {

CHORUS_HD constexpr std::uint32_t bits_of(float value) noexcept { return __builtin_bit_cast(std::uint32_t, value); }
CHORUS_HD constexpr float float_from_bits(std::uint32_t bits) noexcept { return __builtin_bit_cast(float, bits); }

constexpr std::uint32_t sign_bit = 0x80000000u, infinity_bits = 0x7f800000u;

CHORUS_HD constexpr float magnitude(float value) noexcept { return float_from_bits(bits_of(value) & ~sign_bit); }
CHORUS_HD constexpr bool is_nan(float value) noexcept { return (bits_of(value) & ~sign_bit) > infinity_bits; }
CHORUS_HD constexpr bool is_finite(float value) noexcept { return (bits_of(value) & ~sign_bit) < infinity_bits; }
// `size` with the sign of `sign`.
CHORUS_HD constexpr float with_sign_of(float size, float sign) noexcept {
  return float_from_bits((bits_of(size) & ~sign_bit) | (bits_of(sign) & sign_bit));
}
CHORUS_HD constexpr float infinity() noexcept { return float_from_bits(infinity_bits); }
CHORUS_HD constexpr float quiet_nan() noexcept { return float_from_bits(0x7fc00000u); }

// Ordinary comparisons: the caller decides what NaN means.
CHORUS_HD constexpr float larger(float a, float b) noexcept { return a < b ? b : a; }
CHORUS_HD constexpr float clamp(float value, float low, float high) noexcept {
  return value < low ? low : (high < value ? high : value);
}

// Correctly rounded products, sums and differences that the device never
// fuses into an FMA.
CHORUS_HD inline float multiply(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
CHORUS_HD inline float add(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
CHORUS_HD inline float subtract(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
// The same in double (the window's weighted sums, which the host adds in
// double: window/window.hpp).
CHORUS_HD inline double multiply(double a, double b) noexcept {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
CHORUS_HD inline double add(double a, double b) noexcept {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
// Correctly rounded even when a user compiles with -use_fast_math.
CHORUS_HD inline float divide(float a, float b) noexcept {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// To the nearest integer, ties to even (the default rounding mode on the host).
CHORUS_HD inline float round_to_even(float value) noexcept {
#if defined(__CUDA_ARCH__)
  return rintf(value);
#else
  return std::nearbyint(value);
#endif
}

}  // namespace chorus::hd
