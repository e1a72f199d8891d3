// The stated error of a compressed allreduce, per element, for callers that
// know every rank's contribution (tests, chorus-perf's check). With s the
// prescale, e the codec's per-element bound (codec.error_bound, or its
// magnitude_bound where the bound depends on signs, as for onebit) and
// A = sum_r |x_r|:
//
// encode once:  |allreduce(x) - sum_r x_r| <= C + F + G, where
//   C = sum_r e(s x_r) / s              each contribution encoded once
//   F = e(s |sum| + s C) / s            the sum encoded once (e evaluated at a
//                                       magnitude that bounds the float sum)
// ring:         the partial sums are encoded at n-1 hops, in an order the
//   bound does not assume: E_0 = 0, E_h = E_{h-1} + e(s A + E_{h-1}) for
//   h = 1..n-1, then F = e(s |sum| + E_{n-1}); the bound is (E_{n-1} + F) / s + G
// sparse:       C + G, C as for encode once (each contribution's dropped
//   elements; top-k's bound needs the whole tensor, not a piece): the sum is
//   not encoded again
// all:   G = (n + 2) 2^-24 (A + error so far)   float accumulation and rescaling
//
// For op::avg divide the bound by n.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/compressed/compressed_allreduce_algorithms.hpp>
#include <chorus/compressed/compression_options.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <span>
#include <vector>

namespace chorus::compressed {

template <codec::codec Codec>
void bound_for_magnitudes(const Codec& c, std::span<const float> magnitudes, std::span<float> bound) {
  if constexpr (requires { c.magnitude_bound(magnitudes, bound); })
    c.magnitude_bound(magnitudes, bound);
  else
    c.error_bound(magnitudes, bound);
}

namespace detail {

// Per element: the exact sum and sum_r |x_r|.
struct sums {
  std::vector<double> exact, absolute;
};

inline sums sums_of(std::span<const std::vector<float>> contributions, std::size_t count) {
  sums s{std::vector<double>(count, 0.0), std::vector<double>(count, 0.0)};
  for (const std::vector<float>& x : contributions)
    for (std::size_t i = 0; i < count; ++i) {
      s.exact[i] += x[i];
      s.absolute[i] += std::fabs(x[i]);
    }
  return s;
}

// Scaled error of the contributions' own encodings (encode once), E_{n-1} (ring).
template <codec::codec Codec>
std::vector<float> error_before_final(const Codec& c, std::span<const std::vector<float>> contributions,
                                      const sums& totals, float prescale, compression_scheme scheme) {
  const std::size_t count = totals.exact.size();
  std::vector<float> error(count, 0.0f), input(count), bound(count);
  if (scheme == compression_scheme::ring) {
    for (std::size_t hop = 1; hop < contributions.size(); ++hop) {
      for (std::size_t i = 0; i < count; ++i)
        input[i] = static_cast<float>((totals.absolute[i] * prescale + error[i]) * (1.0 + 0x1p-20));
      bound_for_magnitudes(c, input, bound);
      for (std::size_t i = 0; i < count; ++i) error[i] += bound[i];
    }
    return error;
  }
  for (const std::vector<float>& x : contributions) {
    for (std::size_t i = 0; i < count; ++i) input[i] = x[i] * prescale;
    c.error_bound(input, bound);
    for (std::size_t i = 0; i < count; ++i) error[i] += bound[i];
  }
  return error;
}

}  // namespace detail

// contributions[r] is rank r's input, all the same size; `options` as given
// to the allreduce (its scheme is resolved for this count and rank count).
template <codec::codec Codec>
std::vector<float> allreduce_error_bound(const Codec& c, std::span<const std::vector<float>> contributions,
                                         const compression_options& options = {}) {
  const std::size_t count = contributions.empty() ? 0 : contributions[0].size();
  const int ranks = static_cast<int>(contributions.size());
  const float prescale = prescale_for<Codec>(std::max(ranks, 1), options);
  const compression_scheme scheme = scheme_for(c, ranks, count, options);
  const detail::sums totals = detail::sums_of(contributions, count);
  const std::vector<float> before = detail::error_before_final(c, contributions, totals, prescale, scheme);
  std::vector<float> magnitude(count), bound(count);
  for (std::size_t i = 0; i < count; ++i)
    magnitude[i] = static_cast<float>((std::fabs(totals.exact[i]) * prescale + before[i]) * (1.0 + 0x1p-20));
  if (scheme == compression_scheme::sparse)
    std::fill(bound.begin(), bound.end(), 0.0f);
  else
    bound_for_magnitudes(c, magnitude, bound);
  const float rounding = static_cast<float>(contributions.size() + 2) * 0x1p-24f;
  for (std::size_t i = 0; i < count; ++i) {
    const float error = (before[i] + bound[i]) / prescale;
    bound[i] = error + rounding * static_cast<float>(totals.absolute[i] + error) + 1e-30f;
  }
  return bound;
}

}  // namespace chorus::compressed
