// splitmix64 (Steele, Lea and Flood, 2014): the generator chorus draws from
// where draws must be reproducible everywhere (jitter, PowerSGD's first Q):
// 64 bits of state, one add and two multiplies a draw, simple enough to
// write again bit for bit in any language (Python: chorus.heterogeneity).
#pragma once

#include <cmath>
#include <cstdint>

namespace chorus {

class splitmix64 {
 public:
  explicit splitmix64(std::uint64_t seed) noexcept : state_(seed) {}
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in (0, 1), never 0 or 1 (inverse transforms take logs).
  double uniform() noexcept { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  // A standard normal (Box-Muller, from two uniforms).
  double normal() noexcept {
    const double radius = std::sqrt(-2.0 * std::log(uniform()));
    return radius * std::cos(2.0 * 3.14159265358979323846 * uniform());
  }

 private:
  std::uint64_t state_;
};

}  // namespace chorus
