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
#include <chorus/core/simd.hpp>
#include <chorus/core/variables.hpp>

#include <bit>
#include <cstdint>
#include <string_view>

// The vector kernels are compiled for AVX2 + F16C + POPCNT
// (CHORUS_TARGET_AVX2, core/simd.hpp).
#define CHORUS_CODEC_X86 CHORUS_X86_SIMD
#if CHORUS_CODEC_X86
#include <immintrin.h>
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

inline bool cpu_has_avx2() { return simd::runs(simd::width::avx2); }

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
