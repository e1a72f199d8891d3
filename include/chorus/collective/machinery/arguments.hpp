// Argument checks shared by the collective front doors, and the working
// buffer: half and bfloat16 are reduced in float and rounded once at the end.
#pragma once

#include <chorus/collective/machinery/scratch.hpp>

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

// Where an out-of-place call may find one buffer inside the other and
// still run: the in-place form of each collective. `same_range`: input and
// output the same elements (allreduce, reduce). `input_at(k)`: the input is
// exactly the output's elements from k on (allgather, gather at the root:
// this rank's block, NCCL's sendbuff == recvbuff + rank * count).
// `output_at(k)`: the output is the input's from k on (reduce_scatter,
// scatter at the root). `none`: no overlap at all (alltoall).
struct in_place_form {
  enum class which { none, same_range, input_in_output, output_in_input };
  which form = which::same_range;
  std::size_t offset = 0;  // elements into the larger buffer

  static constexpr in_place_form none() noexcept { return {which::none, 0}; }
  static constexpr in_place_form same_range() noexcept { return {which::same_range, 0}; }
  static constexpr in_place_form input_at(std::size_t offset) noexcept { return {which::input_in_output, offset}; }
  static constexpr in_place_form output_at(std::size_t offset) noexcept { return {which::output_in_input, offset}; }

  template <class T>
  bool holds(const T* input, const T* output) const noexcept {
    switch (form) {
      case which::none: return false;
      case which::same_range: return input == output;
      case which::input_in_output: return input == output + offset;
      case which::output_in_input: return output == input + offset;
    }
    return false;
  }
  // What an overlapping call would have to be instead, for its error.
  std::string described() const {
    switch (form) {
      case which::none: return "";
      case which::same_range: return " (in place, they are the same elements)";
      case which::input_in_output:
        return " (in place, the input starts at element " + std::to_string(offset) + " of the output)";
      case which::output_in_input:
        return " (in place, the output starts at element " + std::to_string(offset) + " of the input)";
    }
    return "";
  }
};

// Out-of-place calls: the output must be large enough and must not overlap
// the input unless the two are the call's in-place form (`allowed`);
// returns whether they are (then the caller skips the copy into place).
template <class T>
bool check_output(std::span<const T> input, std::span<T> output, std::size_t needed, int rank, const char* operation,
                  in_place_form allowed = in_place_form::same_range()) {
  if (output.size() < needed)
    throw error(errc::invalid_argument,
                "output holds " + std::to_string(output.size()) + " elements, needs " + std::to_string(needed),
                {rank, -1, operation});
  if (!overlap(input, std::span<const T>(output.data(), output.size()))) return false;
  if (allowed.holds(input.data(), static_cast<const T*>(output.data()))) return true;
  throw error(errc::invalid_argument, "input and output overlap" + allowed.described(), {rank, -1, operation});
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
