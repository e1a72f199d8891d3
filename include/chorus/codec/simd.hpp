// Which code path the codecs' kernels take: AVX2 (+F16C) when the CPU has
// it, detected at run time, or the portable C++ loops. Both give the same
// bits: the portable loops follow the vector code's operation order (for
// example the 8-lane partial sums of onebit), use the same rounding (round to
// nearest even) and never fuse a multiply with an add. One exception:
// decode_add into an accumulator that holds NaN gives NaN on both paths, but
// not always the same NaN (an addition of two NaNs returns one of them, by
// an operand order the compiler picks for the portable loop).
//
//   CHORUS_CODEC_SIMD=portable   forces the portable loops (auto: detect)
#pragma once

#include <chorus/core/env.hpp>
#include <chorus/core/variables.hpp>

#include <bit>
#include <cstdint>
#include <string_view>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CHORUS_CODEC_X86 1
#include <cpuid.h>
#include <immintrin.h>
// The vector kernels are compiled for AVX2 + F16C (and POPCNT, which every
// AVX2 CPU has) whatever the caller's -march; they only run after the CPU
// check below.
#define CHORUS_TARGET_AVX2 __attribute__((target("avx2,f16c,popcnt")))
#else
#define CHORUS_CODEC_X86 0
#endif

// The portable loops must not be contracted into FMAs (the vector code does
// a separate multiply and add), or -march=native builds would differ.
#if defined(__clang__)
#define CHORUS_NO_FMA_CONTRACT
#define CHORUS_NO_FMA_CONTRACT_BODY _Pragma("clang fp contract(off)")
#elif defined(__GNUC__)
#define CHORUS_NO_FMA_CONTRACT __attribute__((optimize("fp-contract=off")))
#define CHORUS_NO_FMA_CONTRACT_BODY
#else
#define CHORUS_NO_FMA_CONTRACT
#define CHORUS_NO_FMA_CONTRACT_BODY
#endif

namespace chorus::codec {

static_assert(std::endian::native == std::endian::little, "the codecs' wire formats are little-endian");

enum class simd_path { portable, avx2 };

constexpr std::string_view to_string(simd_path path) { return path == simd_path::avx2 ? "avx2" : "portable"; }

inline bool cpu_has_avx2() {
#if CHORUS_CODEC_X86
  static const bool has = [] {
    __builtin_cpu_init();
    // F16C from cpuid leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports
    // does not know "f16c".
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") && f16c;
  }();
  return has;
#else
  return false;
#endif
}

// The fastest path this CPU runs, unless CHORUS_CODEC_SIMD says portable.
inline simd_path best_path() {
  static const simd_path path = [] {
    const auto choice = env::get_choice("CHORUS_CODEC_SIMD", variables::codec_simd_choices);
    if (choice && *choice == 1) return simd_path::portable;
    return cpu_has_avx2() ? simd_path::avx2 : simd_path::portable;
  }();
  return path;
}

// A requested path the CPU cannot run falls back to portable.
inline simd_path runnable(simd_path wanted) {
  return wanted == simd_path::avx2 && cpu_has_avx2() ? wanted : simd_path::portable;
}

}  // namespace chorus::codec
