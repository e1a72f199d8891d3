// The stated error of a compressed allreduce, per element, for callers that
// know every rank's contribution (tests, chorus-perf's check):
//
//   |allreduce(x) - sum_r x_r| <= C + F + G, where
//   C = sum_r e(s x_r) / s            each contribution encoded once
//   F = e(|s sum| + s C) / s          the sum encoded once (e evaluated at a
//                                     magnitude that bounds the float sum)
//   G = (n + 2) 2^-24 (sum_r |x_r| + C)   float accumulation and rescaling
// with e the codec's per-element bound (codec.error_bound, or its
// magnitude_bound where the bound depends on signs, as for onebit) and s the
// prescale. For op::avg divide the bound by n.
#pragma once

#include <chorus/codec/codec.hpp>

#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

namespace chorus::compressed {

template <codec::codec Codec>
void bound_for_magnitudes(const Codec& c, std::span<const float> magnitudes, std::span<float> bound) {
  if constexpr (requires { c.magnitude_bound(magnitudes, bound); }) c.magnitude_bound(magnitudes, bound);
  else c.error_bound(magnitudes, bound);
}

// contributions[r] is rank r's input; all the same size.
template <codec::codec Codec>
std::vector<float> allreduce_error_bound(const Codec& c, std::span<const std::vector<float>> contributions, float prescale) {
  const std::size_t count = contributions.empty() ? 0 : contributions[0].size();
  std::vector<float> per_rank(count), scaled(count), encoded_error(count, 0.0f);
  std::vector<double> exact(count, 0.0), absolute(count, 0.0);
  for (const std::vector<float>& x : contributions) {
    for (std::size_t i = 0; i < count; ++i) scaled[i] = x[i] * prescale;
    c.error_bound(scaled, per_rank);
    for (std::size_t i = 0; i < count; ++i) {
      encoded_error[i] += per_rank[i] / prescale;
      exact[i] += x[i];
      absolute[i] += std::fabs(x[i]);
    }
  }
  for (std::size_t i = 0; i < count; ++i) scaled[i] = static_cast<float>((std::fabs(exact[i]) + encoded_error[i]) * prescale * (1.0 + 0x1p-20));
  std::vector<float> bound(count);
  bound_for_magnitudes(c, scaled, bound);
  const float rounding = static_cast<float>(contributions.size() + 2) * 0x1p-24f;
  for (std::size_t i = 0; i < count; ++i)
    bound[i] = encoded_error[i] + bound[i] / prescale +
               rounding * static_cast<float>(absolute[i] + encoded_error[i]) + 1e-30f;
  return bound;
}

}  // namespace chorus::compressed
