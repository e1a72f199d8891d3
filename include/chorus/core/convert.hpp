// Element-wise conversion between element types, to[i] = To(from[i]): how
// half and bfloat16 calls widen into their float accumulators and round back
// once (collective/machinery/arguments.hpp, the local computation's copy).
//
// Same bits as the scalar conversions (half.hpp, bfloat16.hpp) at any width,
// 8 lanes at a time where the CPU allows (AVX2 width: these loops are
// memory-bound there, and AVX-512 adds nothing): half <-> float with F16C's
// VCVTPH2PS and VCVTPS2PH (round to nearest even, imm 0), where the scalar
// widening normalises subnormals in a loop the compiler cannot vectorise;
// bfloat16 <-> float as 8 integer lanes. One difference F16C has, and it
// does not reach a result: it widens a signalling NaN to a quiet one where
// the scalar code keeps the bit; every use rounds back to half, which makes
// any NaN quiet with the same payload.
#pragma once

#include <chorus/core/bfloat16.hpp>
#include <chorus/core/half.hpp>
#include <chorus/core/simd.hpp>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace chorus {

namespace convert_kernel {

template <class From, class To>
[[gnu::always_inline]] inline void portable(const From* from, To* to, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) to[i] = static_cast<To>(from[i]);
}

// bfloat16 in 8-lane integer vectors (GCC and Clang's generic vectors,
// which become AVX2 or SSE2 instructions as the function's target allows):
// widening is a shift; narrowing rounds to nearest even and keeps NaN a
// quiet NaN, bfloat16.hpp's formula written as a lane select.
#if defined(__GNUC__) && !defined(__CUDACC__)
using bits16x8 = std::uint16_t __attribute__((vector_size(16)));
using bits32x8 = std::uint32_t __attribute__((vector_size(32)));

[[gnu::always_inline]] inline void bfloat16_to_float(const bfloat16* from, float* to, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    bits16x8 b;
    std::memcpy(&b, from + i, sizeof b);
    const bits32x8 f = __builtin_convertvector(b, bits32x8) << 16;
    std::memcpy(to + i, &f, sizeof f);
  }
  portable(from + i, to + i, n - i);
}
[[gnu::always_inline]] inline void float_to_bfloat16(const float* from, bfloat16* to, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    bits32x8 f;
    std::memcpy(&f, from + i, sizeof f);
    const bits32x8 rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16;
    const bits32x8 quiet_nan = (f >> 16) | 0x0040u;
    const bits32x8 chosen = (f & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded;
    const bits16x8 b = __builtin_convertvector(chosen, bits16x8);
    std::memcpy(static_cast<void*>(to + i), &b, sizeof b);
  }
  portable(from + i, to + i, n - i);
}
#else
[[gnu::always_inline]] inline void bfloat16_to_float(const bfloat16* from, float* to, std::size_t n) {
  portable(from, to, n);
}
[[gnu::always_inline]] inline void float_to_bfloat16(const float* from, bfloat16* to, std::size_t n) {
  portable(from, to, n);
}
#endif

static_assert(sizeof(half) == 2 && sizeof(bfloat16) == 2 && std::is_trivially_copyable_v<half> &&
              std::is_trivially_copyable_v<bfloat16>);

#if CHORUS_X86_SIMD && !defined(__CUDACC__)
#define CHORUS_CONVERT_DISPATCH 1
using halves8 = short __attribute__((vector_size(16)));
using floats8 = float __attribute__((vector_size(32)));

CHORUS_TARGET_AVX2 inline void half_to_float_f16c(const half* from, float* to, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    halves8 h;
    std::memcpy(&h, from + i, sizeof h);
    const floats8 f = __builtin_ia32_vcvtph2ps256(h);
    std::memcpy(to + i, &f, sizeof f);
  }
  portable(from + i, to + i, n - i);
}
CHORUS_TARGET_AVX2 inline void float_to_half_f16c(const float* from, half* to, std::size_t n) {
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    floats8 f;
    std::memcpy(&f, from + i, sizeof f);
    const halves8 h = __builtin_ia32_vcvtps2ph256(f, 0);
    std::memcpy(static_cast<void*>(to + i), &h, sizeof h);
  }
  portable(from + i, to + i, n - i);
}
CHORUS_TARGET_AVX2 inline void bfloat16_to_float_avx2(const bfloat16* from, float* to, std::size_t n) {
  bfloat16_to_float(from, to, n);
}
CHORUS_TARGET_AVX2 inline void float_to_bfloat16_avx2(const float* from, bfloat16* to, std::size_t n) {
  float_to_bfloat16(from, to, n);
}
#else
#define CHORUS_CONVERT_DISPATCH 0
#endif

}  // namespace convert_kernel

// to[i] = To(from[i]) at a given width (one this CPU runs, simd::runs):
// what convert() runs, and what the tests compare bit for bit.
template <class From, class To>
void convert_at(simd::width at, std::span<const From> from, std::span<To> to) {
  const std::size_t n = from.size();
  [[maybe_unused]] const bool wide = at != simd::width::portable;
  if constexpr (std::is_same_v<From, half> && std::is_same_v<To, float>) {
#if CHORUS_CONVERT_DISPATCH
    if (wide) return convert_kernel::half_to_float_f16c(from.data(), to.data(), n);
#endif
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, half>) {
#if CHORUS_CONVERT_DISPATCH
    if (wide) return convert_kernel::float_to_half_f16c(from.data(), to.data(), n);
#endif
  } else if constexpr (std::is_same_v<From, bfloat16> && std::is_same_v<To, float>) {
#if CHORUS_CONVERT_DISPATCH
    if (wide) return convert_kernel::bfloat16_to_float_avx2(from.data(), to.data(), n);
#endif
    return convert_kernel::bfloat16_to_float(from.data(), to.data(), n);
  } else if constexpr (std::is_same_v<From, float> && std::is_same_v<To, bfloat16>) {
#if CHORUS_CONVERT_DISPATCH
    if (wide) return convert_kernel::float_to_bfloat16_avx2(from.data(), to.data(), n);
#endif
    return convert_kernel::float_to_bfloat16(from.data(), to.data(), n);
  } else if constexpr (std::is_same_v<From, To>) {
    // memmove: a caller may shift elements within one buffer.
    if (n != 0 && from.data() != to.data()) std::memmove(static_cast<void*>(to.data()), from.data(), n * sizeof(From));
    return;
  }
  convert_kernel::portable(from.data(), to.data(), n);
}

// to[i] = To(from[i]) at the widest width this CPU runs; `to` has at least
// from.size() elements. A span converted onto itself costs nothing.
template <class From, class To>
void convert(std::span<const From> from, std::span<To> to) {
  convert_at(simd::widest(), from, to);
}

}  // namespace chorus
