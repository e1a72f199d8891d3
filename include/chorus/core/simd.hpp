// Which vector instructions this CPU runs, asked once: the one check that
// the reduction kernels (collective/machinery/reduce_local.hpp) and the codecs'
// kernels (codec/simd_kernels.hpp) dispatch on. Kernels are compiled for a wider
// set with the target attributes below, whatever the caller's -march, and
// run only after this check says the CPU has it.
//
//   avx2     AVX2 with F16C and POPCNT (every AVX2 CPU has both)
//   avx512   AVX-512 F, BW and VL, on top of avx2
#pragma once

#include <string_view>
#include <vector>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define CHORUS_X86_SIMD 1
#include <cpuid.h>
#define CHORUS_TARGET_AVX2 __attribute__((target("avx2,f16c,popcnt")))
// 512-bit vectors where the compiler would otherwise prefer 256 (its
// default tuning for AVX-512).
#if defined(__clang__)
#define CHORUS_TARGET_AVX512 \
  __attribute__((target("avx2,f16c,popcnt,avx512f,avx512bw,avx512vl"), min_vector_width(512)))
#else
#define CHORUS_TARGET_AVX512 \
  __attribute__((target("avx2,f16c,popcnt,avx512f,avx512bw,avx512vl,prefer-vector-width=512")))
#endif
#else
#define CHORUS_X86_SIMD 0
#endif

namespace chorus::simd {

enum class width { portable, avx2, avx512 };

constexpr std::string_view to_string(width w) {
  return w == width::avx512 ? "avx512" : w == width::avx2 ? "avx2" : "portable";
}

// The widest set this CPU runs.
inline width widest() {
#if CHORUS_X86_SIMD
  static const width found = [] {
    __builtin_cpu_init();
    // F16C from cpuid leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports
    // does not know "f16c".
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
    if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt") && f16c)) return width::portable;
    const bool avx512 =
        __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    return avx512 ? width::avx512 : width::avx2;
  }();
  return found;
#else
  return width::portable;
#endif
}

// Whether this CPU runs `wanted`.
inline bool runs(width wanted) { return static_cast<int>(wanted) <= static_cast<int>(widest()); }

// Every width this CPU runs, narrowest first: what the kernels' tests and
// bench/memory_bound compare.
inline std::vector<width> runnable_widths() {
  std::vector<width> widths;
  for (const width w : {width::portable, width::avx2, width::avx512})
    if (runs(w)) widths.push_back(w);
  return widths;
}

}  // namespace chorus::simd
