// A copy whose stores bypass the caches (non-temporal stores), and the rule
// for when one pays.
//
// A plain store to a line that is not in the cache first reads the line
// from memory (a read for ownership), then writes it back: 2 S of memory
// traffic to write S bytes. A streaming store writes the line without
// reading it: S. An out-of-place collective whose output does not fit in
// the last-level cache pays that read on every output line, so its copies
// out stream instead (docs/performance.md, "Out of place past the cache").
// Below the cache size a streamed line
// would be evicted that the caller is about to read, so small calls store
// as usual.
//
// Streaming stores are weakly ordered: call streaming_fence() before
// anything else (another thread, the caller) may read what they wrote.
#pragma once

#include <chorus/core/env.hpp>
#include <chorus/core/variables.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <span>
#include <type_traits>

#if defined(__x86_64__) && !defined(__CUDACC__)
#define CHORUS_STREAMING_STORES 1
#include <emmintrin.h>
#else
#define CHORUS_STREAMING_STORES 0
#endif

namespace chorus {

// Bytes of the last-level cache of CPU 0, read from sysfs, or `fallback`
// where it cannot be read (sysconf's _SC_LEVEL3_CACHE_SIZE can be wrong in
// a virtual machine: ten times sysfs's figure on the development one).
inline std::size_t last_level_cache_bytes(std::size_t fallback = std::size_t{32} << 20) {
  static const std::size_t found = [fallback] {
    std::size_t largest = 0;
    for (int index = 0; index < 8; ++index) {
      char path[64];
      std::snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
      std::FILE* file = std::fopen(path, "r");
      if (file == nullptr) break;
      unsigned long long value = 0;
      char unit = 0;
      const int read = std::fscanf(file, "%llu%c", &value, &unit);
      std::fclose(file);
      if (read < 1) break;
      if (unit == 'K') value <<= 10;
      if (unit == 'M') value <<= 20;
      largest = std::max(largest, static_cast<std::size_t>(value));
    }
    return largest != 0 ? largest : fallback;
  }();
  return found;
}

// Whether a call that writes `footprint` bytes of fresh output on this
// host (over all its ranks, with their inputs) should stream them:
// CHORUS_STREAMING_STORES `always` or `never` where set, else when they
// fill the last-level cache anyway: below it the output's lines may be
// cached already, and streaming them lost (docs/performance.md, "Out of
// place past the cache").
inline bool streaming_pays(std::size_t footprint) {
  static const std::size_t choice =
      env::get_choice("CHORUS_STREAMING_STORES", variables::streaming_store_choices).value_or(0);
  return choice == 1 || (choice == 0 && CHORUS_STREAMING_STORES && footprint >= last_level_cache_bytes());
}

// to = from with streaming stores where the target is 16-byte aligned
// (plain stores for the unaligned head and the tail); the spans must not
// overlap. Falls back to a plain copy where there are no streaming stores.
template <class T>
  requires std::is_trivially_copyable_v<T>
void streaming_copy(std::span<const T> from, std::span<T> to) {
  auto* out = reinterpret_cast<unsigned char*>(to.data());
  const auto* in = reinterpret_cast<const unsigned char*>(from.data());
  std::size_t bytes = from.size_bytes();
  if (bytes == 0) return;
#if CHORUS_STREAMING_STORES
  const std::size_t head = std::min(bytes, (16 - reinterpret_cast<std::uintptr_t>(out) % 16) % 16);
  std::memcpy(out, in, head);
  out += head, in += head, bytes -= head;
  for (; bytes >= 64; out += 64, in += 64, bytes -= 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 32));
    const __m128i d = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(out), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(out + 48), d);
  }
#endif
  std::memcpy(out, in, bytes);
}

// Orders every streaming store before it ahead of every store after it.
inline void streaming_fence() {
#if CHORUS_STREAMING_STORES
  _mm_sfence();
#endif
}

// to = from, streamed or stored as usual.
template <class T>
void copy_out(std::span<const T> from, std::span<T> to, bool streaming) {
  if (streaming)
    streaming_copy(from, to);
  else
    std::copy(from.begin(), from.end(), to.begin());
}

}  // namespace chorus
