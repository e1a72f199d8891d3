// random-k sparsification (Stich, Cordonnier, Jaggi 2018; with error
// feedback, codec/error_feedback.hpp): keep k = ceil(ratio n) elements
// chosen at random, with a seed all ranks share, so that on the same call
// every rank keeps the same indices and a compressed allreduce sums the kept
// values as they are (compressed/compressed_allreduce_sparse.hpp) instead of gathering
// everyone's indices.
//
//   chorus::codec::error_feedback grads_feedback{chorus::codec::randomk{0.01, seed}};
//
// The indices of a call: the tensor is cut into k strata of n/k elements
// (rounded down or up) and one index is drawn uniformly in each, by
// splitmix64 of the call's key: every element has a chance of about k/n,
// the indices are distinct and ascending, and nothing is stored. The key is
// splitmix64(seed, t) for the codec's t-th encode (counted per codec and
// its copies: every rank that makes the same calls on its own codec agrees) and
// travels at the front of the bytes, so decoding needs no state. Values are
// sent unscaled: with error feedback the dropped part comes back later.
//
// Bytes: 8 (the key) + 4 per kept element; no indices. Error: 0 on a kept
// element, |x_i| on a dropped one.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/codec/sparse.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string_view>

namespace chorus::codec {

class randomk {
 public:
  static constexpr std::string_view name = "randomk";
  static constexpr std::uint64_t default_seed = 0x63686f727573ULL;  // "chorus"
  static constexpr std::size_t key_bytes = sizeof(std::uint64_t);

  // By name (codec_list.hpp): "randomk", "randomk:R" or "randomk:R:SEED" (every rank the same seed).
  static constexpr std::string_view settings = "[:R[:SEED]]";
  static randomk from_settings(std::string_view text, std::string_view whole) {
    const std::size_t colon = text.find(':');
    const double ratio = text.empty() ? 0.01 : detail::parse_setting<double>(text.substr(0, colon), whole, "ratio");
    if (colon == std::string_view::npos) return randomk(ratio);
    return randomk(ratio, detail::parse_setting<std::uint64_t>(text.substr(colon + 1), whole, "seed"));
  }
  explicit randomk(double ratio = 0.01, std::uint64_t seed = default_seed)
      : ratio_(detail::checked_ratio(ratio, name)),
        seed_(seed),
        calls_(std::make_shared<std::atomic<std::uint64_t>>(0)) {}

  double ratio() const noexcept { return ratio_; }
  std::uint64_t seed() const noexcept { return seed_; }
  // encode calls so far: the next one uses key_for(calls()).
  std::uint64_t calls() const noexcept { return calls_->load(std::memory_order_relaxed); }
  std::size_t kept(std::size_t n) const { return detail::kept_count(ratio_, n); }
  std::size_t encoded_bytes(std::size_t n) const { return n == 0 ? 0 : key_bytes + kept(n) * sizeof(float); }
  std::size_t granule() const { return 1; }  // sparse: the whole tensor is one unit (codec.hpp)

  std::uint64_t key_for(std::uint64_t call) const noexcept { return mix(seed_ ^ mix(call + 1)); }
  // The key a call's bytes carry.
  static std::uint64_t key_of(std::span<const std::byte> encoded) noexcept {
    std::uint64_t key = 0;
    if (encoded.size() >= key_bytes) std::memcpy(&key, encoded.data(), key_bytes);
    return key;
  }
  // The kept values, in index order, where the bytes hold them (after the key).
  static std::span<std::byte> values_of(std::span<std::byte> encoded) noexcept {
    return encoded.size() < key_bytes ? encoded.first(0) : encoded.subspan(key_bytes);
  }

  // The j-th of the k indices a key picks in an n-element tensor.
  static std::size_t index(std::uint64_t key, std::size_t j, std::size_t n, std::size_t k) noexcept {
    const std::size_t begin = j * n / k, size = (j + 1) * n / k - begin;  // size >= 1 as k <= n
    const std::uint64_t draw = mix(key + j) >> 32;
    return begin + static_cast<std::size_t>((draw * size) >> 32);  // uniform in [0, size), size < 2^32
  }

  void encode(std::span<const float> in, std::span<std::byte> out) const {
    detail::require_sizes(name, "encode", in.size(), encoded_bytes(in.size()), out.size());
    detail::require_indexable(name, in.size());
    if (in.empty()) return;
    const std::uint64_t key = key_for(calls_->fetch_add(1, std::memory_order_relaxed));
    std::memcpy(out.data(), &key, key_bytes);
    const std::size_t n = in.size(), k = kept(n);
    for (std::size_t j = 0; j < k; ++j)
      detail::store_float(out.data() + key_bytes + j * sizeof(float), in[index(key, j, n, k)]);
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
  // Which elements the next call keeps is not known before it is made.
  void error_bound(std::span<const float> in, std::span<float> bound) const {
    std::transform(in.begin(), in.end(), bound.begin(), [](float x) { return std::fabs(x); });
  }

 private:
  // splitmix64's finaliser (Steele, Lea, Flood 2014): a bijection that mixes
  // every input bit into every output bit; the same on every machine.
  static constexpr std::uint64_t mix(std::uint64_t z) noexcept {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

  template <bool Add>
  static void place_all(std::span<const std::byte> in, std::span<float> out) {
    if (out.empty()) return;
    const std::uint64_t key = key_of(in);
    const std::size_t n = out.size(), k = (in.size() - key_bytes) / sizeof(float);
    for (std::size_t j = 0; j < k; ++j)
      detail::place<Add>(name, index(key, j, n, k), detail::load_float(in.data() + key_bytes + j * sizeof(float)), out);
  }

  double ratio_;
  std::uint64_t seed_;
  // const encode counts its calls; copies share the count (a codec passed by
  // value, as codec::visit does, still moves the original on).
  std::shared_ptr<std::atomic<std::uint64_t>> calls_;
};

template <>
inline constexpr bool sparse<randomk> = true;
template <>
inline constexpr bool sparse_indices_agree<randomk> = true;

}  // namespace chorus::codec
