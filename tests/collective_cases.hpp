// Inputs and serial references for the collective tests.
//
// Inputs are chosen so that the exact result is known independently of any
// reduction order: floating-point inputs are multiples of 1/8 in [-6, 6], so
// sums of up to 9 of them are exact in float (they need at most 9 bits), and
// products use only -1, 1/2, 1 and 2. The reference is therefore exact and
// the expected result of a float sum is that exact value; for half and
// bfloat16, which are reduced in float and rounded once, it is the exact sum
// rounded once. The bound for random (non-dyadic) inputs is stated where it
// is used.
#pragma once

#include <chorus/chorus.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace chorus_test {

inline std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  return x ^ (x >> 33);
}

enum class flavour { general, product };

// The value rank `rank` contributes at position `index` in case `seed`.
template <class T>
T input_value(int rank, std::size_t index, std::uint64_t seed, flavour kind) {
  const std::uint64_t bits = mix(seed * 1000003u + static_cast<std::uint64_t>(rank) * 7919u + index);
  if (kind == flavour::product) {
    static constexpr int choices[] = {-1, 1, 2, 1};
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(choices[bits % 4]);
    else {
      static constexpr float real_choices[] = {-1.0f, 0.5f, 1.0f, 2.0f};
      return T(real_choices[bits % 4]);
    }
  }
  if constexpr (std::is_same_v<T, std::uint8_t> || std::is_same_v<T, std::uint32_t> || std::is_same_v<T, std::uint64_t>)
    return static_cast<T>(bits % 21);  // 0..20: a 9-rank sum fits in uint8
  else if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<int>(bits % 11) - 5);  // -5..5: fits in int8
  else
    return T(static_cast<float>(static_cast<int>(bits % 97) - 48) / 8.0f);
}

template <class T>
std::vector<T> inputs(int rank, std::size_t count, std::uint64_t seed, flavour kind) {
  std::vector<T> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = input_value<T>(rank, i, seed, kind);
  return values;
}

// Exact serial reduction over ranks `members` (computed in double or
// int64, where every intermediate is exact for these inputs).
template <class T, class Op>
std::vector<T> reference(const std::vector<int>& members, std::size_t count, std::uint64_t seed, flavour kind,
                         const Op&) {
  using wide = std::conditional_t<std::is_integral_v<T>, std::int64_t, double>;
  std::vector<T> result(count);
  for (std::size_t i = 0; i < count; ++i) {
    wide total = static_cast<wide>(static_cast<double>(input_value<T>(members[0], i, seed, kind)));
    for (std::size_t m = 1; m < members.size(); ++m) {
      const auto value = static_cast<wide>(static_cast<double>(input_value<T>(members[m], i, seed, kind)));
      if constexpr (std::is_same_v<Op, chorus::op::prod>)
        total *= value;
      else if constexpr (std::is_same_v<Op, chorus::op::min>)
        total = std::min(total, value);
      else if constexpr (std::is_same_v<Op, chorus::op::max>)
        total = std::max(total, value);
      else
        total += value;  // sum, avg
    }
    if constexpr (std::is_same_v<Op, chorus::op::avg>) {
      using A = chorus::accumulator_t<T>;  // what the library divides in
      if constexpr (std::is_integral_v<T>)
        total /= static_cast<wide>(members.size());
      else
        total = static_cast<double>(static_cast<A>(total) / static_cast<A>(members.size()));
    }
    if constexpr (std::is_integral_v<T>)
      result[i] = static_cast<T>(total);
    else if constexpr (std::is_same_v<T, double>)
      result[i] = total;
    else
      result[i] = T(static_cast<float>(total));  // one rounding for half/bfloat16
  }
  return result;
}

// The exact sum over `members` of each rank's input times `factor`, the
// product rounded to T first (premul_sum's definition), rounded once like
// a sum. Exact for factors with few bits (3/8: products of these inputs
// need at most 10 bits, sums of 9 of them 14).
template <class T>
std::vector<T> premultiplied_reference(const std::vector<int>& members, std::size_t count, std::uint64_t seed,
                                       double factor) {
  using A = chorus::accumulator_t<T>;
  std::vector<T> result(count);
  for (std::size_t i = 0; i < count; ++i) {
    double total = 0.0;
    for (const int member : members) {
      const T product =
          static_cast<T>(static_cast<A>(input_value<T>(member, i, seed, flavour::general)) * static_cast<A>(factor));
      total += static_cast<double>(static_cast<A>(product));
    }
    if constexpr (std::is_same_v<T, double>)
      result[i] = total;
    else
      result[i] = T(static_cast<float>(total));
  }
  return result;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

template <class T>
std::size_t count_different(const std::vector<T>& got, const std::vector<T>& expected) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) wrong += std::memcmp(&got[i], &expected[i], sizeof(T)) != 0;
  return wrong + (got.size() > expected.size() ? got.size() - expected.size() : expected.size() - got.size());
}

inline std::uint64_t fingerprint(const void* data, std::size_t bytes) {
  std::uint64_t hash = 1469598103934665603ull;
  const auto* p = static_cast<const unsigned char*>(data);
  for (std::size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}

inline std::vector<int> all_ranks(int n) {
  std::vector<int> members(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) members[static_cast<std::size_t>(r)] = r;
  return members;
}

}  // namespace chorus_test
