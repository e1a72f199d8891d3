// Applying and undoing a compressed allreduce's prescale, and the per-thread
// buffers its schemes keep between calls (and their bytes as the octets the
// plain collectives move).
#pragma once

#include <chorus/core/rank_local.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace chorus::compressed {

// out[i] = in[i] * factor, in blocks through a local array so that GCC's
// -O2 vectoriser runs it (it will not version a plain loop for aliasing).
inline void scale_into(std::span<const float> in, std::span<float> out, float factor) {
  constexpr std::size_t lanes = 16;
  std::size_t i = 0;
  for (; i + lanes <= in.size(); i += lanes) {
    float block[lanes];
    for (std::size_t k = 0; k < lanes; ++k) block[k] = in[i + k] * factor;
    for (std::size_t k = 0; k < lanes; ++k) out[i + k] = block[k];
  }
  for (; i < in.size(); ++i) out[i] = in[i] * factor;
}

// Undoing the prescale: multiplying by 1/s equals dividing by s exactly when
// s is a power of two (the default); otherwise divide.
inline bool unscales_by_multiplying(float prescale) {
  int exponent = 0;
  return std::frexp(prescale, &exponent) == 0.5f;
}
inline void unscale(std::span<float> data, float prescale) {
  if (prescale == 1.0f) return;
  if (unscales_by_multiplying(prescale)) {
    scale_into(data, data, 1.0f / prescale);
    return;
  }
  for (float& value : data) value /= prescale;
}

template <class T>
std::span<T> sized(std::vector<T>& storage, std::size_t count) {
  if (storage.size() < count) storage.resize(count);
  return std::span<T>(storage).first(count);
}

// A compressed collective's buffers: encoded bytes (my contribution, what
// arrives, what is gathered) and floats (a partial sum, my prescaled
// contribution, error feedback's work on the direct path). Each is asked
// for once per call (the last: at one size per call).
enum class scratch_for : std::size_t { mine, received, gathered, sum, contribution, feedback };

// The host's buffers, per rank (core/rank_local.hpp), grown as needed and kept for the next call.
struct workspace {
  std::vector<float> contribution, sum, feedback;
  std::vector<std::byte> mine, received, gathered;

  static workspace& local() { return rank_local<workspace>(); }
  std::span<std::byte> bytes(scratch_for use, std::size_t count) {
    return sized(use == scratch_for::mine ? mine : use == scratch_for::received ? received : gathered, count);
  }
  std::span<float> floats(scratch_for use, std::size_t count) {
    return sized(use == scratch_for::sum ? sum : use == scratch_for::contribution ? contribution : feedback, count);
  }
};

inline std::span<std::uint8_t> as_octets(std::span<std::byte> bytes) noexcept {
  return {reinterpret_cast<std::uint8_t*>(bytes.data()), bytes.size()};
}

}  // namespace chorus::compressed
