// Argument checks shared by the collective front doors, and the working
// buffer: half and bfloat16 are reduced in float and rounded once at the end.
#pragma once

#include <chorus/collective/scratch.hpp>

#include <chorus/core/convert.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace chorus::collective {

template <class T>
bool overlap(std::span<const T> a, std::span<const T> b) noexcept {
  if (a.empty() || b.empty()) return false;
  const auto* a_begin = a.data();
  const auto* b_begin = b.data();
  return std::less<const T*>{}(a_begin, b_begin + b.size()) && std::less<const T*>{}(b_begin, a_begin + a.size());
}

// Out-of-place calls: the output must be large enough and must not partly
// overlap the input (exactly the same range means in place).
template <class T>
void check_output(std::span<const T> input, std::span<T> output, std::size_t needed, int rank, const char* operation,
                  bool same_allowed = true) {
  if (output.size() < needed)
    throw error(errc::invalid_argument,
                "output holds " + std::to_string(output.size()) + " elements, needs " + std::to_string(needed),
                {rank, -1, operation});
  const std::span<const T> out(output.data(), output.size());
  const bool same = input.data() == output.data();
  if (overlap(input, out) && !(same && same_allowed))
    throw error(errc::invalid_argument, "input and output overlap", {rank, -1, operation});
}

inline void check_root(int root, int size, int rank, const char* operation) {
  if (root < 0 || root >= size)
    throw error(errc::invalid_argument, "root " + std::to_string(root) + " is not in [0, " + std::to_string(size) + ")",
                {rank, -1, operation});
}

// A copy of `input` in the accumulator type (float for half and bfloat16),
// held in scratch slot 1.
template <element T>
std::span<accumulator_t<T>> widened_copy(std::span<const T> input) {
  const auto wide = scratch<accumulator_t<T>>(input.size(), 1);
  convert(input, wide);
  return wide;
}

// Rounds accumulated values back to the element type, once, into `output`.
template <class A, element T>
void narrow_into(std::span<const A> values, std::span<T> output) {
  convert(values, output);
}

// Runs work(input, result) on spans of the accumulator type: `input` and
// `data` themselves (the same span in place), or a float copy of `input`
// for half and bfloat16, in place, whose result is rounded into `data` once.
template <element T, class Work>
void with_accumulator(std::span<const T> input, std::span<T> data, Work&& work) {
  using A = accumulator_t<T>;
  if constexpr (std::is_same_v<A, T>) {
    work(input, data);
  } else {
    const std::span<A> wide = widened_copy(input);
    work(std::span<const A>(wide), wide);
    narrow_into(std::span<const A>(wide), data);
  }
}

}  // namespace chorus::collective
