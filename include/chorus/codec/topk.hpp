// top-k sparsification (Stich, Cordonnier, Jaggi 2018; with error feedback,
// codec/error_feedback.hpp): keep the k = ceil(ratio n) elements of largest
// magnitude, drop the rest.
//
//   chorus::codec::error_feedback grads_feedback{chorus::codec::topk{0.01}};
//   chorus::allreduce(comm, grads, chorus::op::avg{}, grads_feedback);
//
// Exact, not approximate: the k-th largest magnitude is found by selection
// (std::nth_element, O(n), on the candidates a sampled lower bound leaves),
// then one pass in index order keeps every element above it and, of those
// equal to it, the first ones, so the same input always gives the same
// bytes. NaN ranks above every number.
//
// Bytes: 8 per kept element: k 32-bit indices (ascending), then k floats.
// Error: 0 on a kept element, |x_i| on a dropped one, and no dropped
// element is larger than the smallest kept one.
//
// The kept indices differ from rank to rank, so a compressed allreduce
// allgathers every rank's parts (compressed/compressed_allreduce_sparse.hpp).
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/codec/sparse.hpp>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::codec {

class topk {
 public:
  static constexpr std::string_view name = "topk";

  explicit topk(double ratio = 0.01) : ratio_(detail::checked_ratio(ratio, name)) {}
  // By name (codec_list.hpp): "topk" or "topk:R", R the ratio of elements kept.
  static constexpr std::string_view settings = "[:R]";
  static topk from_settings(std::string_view text, std::string_view whole) {
    if (text.find(':') != std::string_view::npos)
      throw error(errc::invalid_argument, "codec '" + std::string(whole) + "': topk takes a ratio only (topk:R)");
    return text.empty() ? topk() : topk(detail::parse_setting<double>(text, whole, "ratio"));
  }

  double ratio() const noexcept { return ratio_; }
  std::size_t kept(std::size_t n) const { return detail::kept_count(ratio_, n); }
  std::size_t encoded_bytes(std::size_t n) const { return kept(n) * (sizeof(std::uint32_t) + sizeof(float)); }
  std::size_t granule() const { return 1; }  // sparse: the whole tensor is one unit (codec.hpp)

  void encode(std::span<const float> in, std::span<std::byte> out) const {
    detail::require_sizes(name, "encode", in.size(), encoded_bytes(in.size()), out.size());
    detail::require_indexable(name, in.size());
    const std::size_t k = kept(in.size());
    if (k == 0) return;
    std::byte* indices = out.data();
    std::byte* values = out.data() + k * sizeof(std::uint32_t);
    std::size_t written = 0;
    for_each_kept(in, k, [&](std::size_t i) {
      const auto index = static_cast<std::uint32_t>(i);
      std::memcpy(indices + written * sizeof(index), &index, sizeof(index));
      detail::store_float(values + written * sizeof(float), in[i]);
      ++written;
    });
  }
  void decode(std::span<const std::byte> in, std::span<float> out) const {
    detail::require_sizes(name, "decode", out.size(), encoded_bytes(out.size()), in.size());
    std::fill(out.begin(), out.end(), 0.0f);
    place_all<false>(in, out);
  }
  void decode_add(std::span<const std::byte> in, std::span<float> acc) const {
    detail::require_sizes(name, "decode_add", acc.size(), encoded_bytes(acc.size()), in.size());
    place_all<true>(in, acc);
  }
  void error_bound(std::span<const float> in, std::span<float> bound) const {
    std::transform(in.begin(), in.end(), bound.begin(), [](float x) { return std::fabs(x); });
    for_each_kept(in, kept(in.size()), [&](std::size_t i) { bound[i] = 0.0f; });
  }

 private:
  // |x| as the bits of a float without its sign: ordered like |x| for
  // numbers, with NaN above infinity (so a NaN is sent, not hidden in a
  // residual), and compared as integers.
  static std::uint32_t magnitude_key(float x) noexcept { return std::bit_cast<std::uint32_t>(x) & 0x7fffffffu; }

  // Calls keep(i) for the k kept elements, in index order.
  template <class Keep>
  static void for_each_kept(std::span<const float> in, std::size_t k, Keep&& keep) {
    if (k == 0) return;
    std::size_t above = 0;  // elements strictly above the threshold
    const std::uint32_t threshold = kth_largest_magnitude(in, k, above);
    std::size_t ties = k - above;  // elements equal to the threshold that still fit
    for (std::size_t i = 0; i < in.size(); ++i) {
      const std::uint32_t magnitude = magnitude_key(in[i]);
      if (magnitude > threshold) {
        keep(i);
      } else if (magnitude == threshold && ties > 0) {
        --ties;
        keep(i);
      }
    }
  }

  // The k-th largest magnitude, exactly, and how many lie above it. A
  // selection over all n magnitudes costs ~10 ns an element; instead a
  // regular sample of 4096 gives a lower bound t likely to leave about 2k
  // candidates, one pass keeps the magnitudes >= t, and the selection runs
  // on those. If fewer than k pass (the sample misled), the true k-th
  // largest is below t and the selection runs on all of them; either way
  // the answer is exact.
  static std::uint32_t kth_largest_magnitude(std::span<const float> in, std::size_t k, std::size_t& above) {
    thread_local std::vector<std::uint32_t> candidates;
    candidates.clear();
    constexpr std::size_t sample_size = 4096;
    if (in.size() > 4 * sample_size) {
      const std::uint32_t lower = sampled_lower_bound(in, k, sample_size);
      for (float x : in)
        if (const std::uint32_t magnitude = magnitude_key(x); magnitude >= lower) candidates.push_back(magnitude);
    }
    if (candidates.size() < k) {
      candidates.resize(in.size());
      std::transform(in.begin(), in.end(), candidates.begin(), magnitude_key);
    }
    const auto kth = candidates.begin() + static_cast<std::ptrdiff_t>(k - 1);
    std::nth_element(candidates.begin(), kth, candidates.end(), std::greater<>());
    above = static_cast<std::size_t>(std::count_if(candidates.begin(), kth, [&](std::uint32_t m) { return m > *kth; }));
    return *kth;
  }

  // The magnitude of rank about 2k n/s + 16 in every (n/s)-th element.
  static std::uint32_t sampled_lower_bound(std::span<const float> in, std::size_t k, std::size_t sample_size) {
    thread_local std::vector<std::uint32_t> sample;
    sample.resize(sample_size);
    const std::size_t stride = in.size() / sample_size;
    for (std::size_t j = 0; j < sample_size; ++j) sample[j] = magnitude_key(in[j * stride]);
    const std::size_t wanted = std::min(sample_size - 1, 2 * k * sample_size / in.size() + 16);
    const auto at = sample.begin() + static_cast<std::ptrdiff_t>(wanted);
    std::nth_element(sample.begin(), at, sample.end(), std::greater<>());
    return *at;
  }

  template <bool Add>
  void place_all(std::span<const std::byte> in, std::span<float> out) const {
    const std::size_t k = kept(out.size());
    for (std::size_t j = 0; j < k; ++j) {
      std::uint32_t index;
      std::memcpy(&index, in.data() + j * sizeof(index), sizeof(index));
      detail::place<Add>(name, index, detail::load_float(in.data() + (k + j) * sizeof(float)), out);
    }
  }

  double ratio_;
};

template <>
inline constexpr bool sparse<topk> = true;

}  // namespace chorus::codec
