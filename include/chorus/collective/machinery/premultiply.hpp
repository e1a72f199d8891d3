// premul_sum (core/reduce_op.hpp) at the reducing front doors: each rank
// multiplies its input by the factor, rounds the product to the element
// type, and the sum's algorithms run on the products unchanged, as NCCL's
// ncclRedOpCreatePreMulSum defines it. So every rank ends with the same
// bits, and a premul_sum costs a sum plus one pass over the input.
//
// Host memory: the product is written where the call then reads it (the
// output of an allreduce; a kept scratch, slot 3, for reduce and
// reduce_scatter, whose input stays as it was). Device memory: through a
// host copy (route/memory_router.hpp), the product taken there.
#pragma once

#include <chorus/collective/machinery/scratch.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>

#include <cstddef>
#include <span>
#include <type_traits>

namespace chorus::collective {

template <class T>
concept premultipliable = std::is_floating_point_v<accumulator_t<T>>;

// into[i] = input[i] * factor, in the accumulator type, rounded to T once.
template <element T>
  requires premultipliable<T>
void multiply_into(std::span<const T> input, std::span<T> into, double factor) noexcept {
  using A = accumulator_t<T>;
  const auto by = static_cast<A>(factor);
  for (std::size_t i = 0; i < input.size(); ++i) into[i] = static_cast<T>(static_cast<A>(input[i]) * by);
}

// `input` times the factor, in scratch slot 3 (the call's input stays as it was).
template <element T>
  requires premultipliable<T>
std::span<const T> premultiplied(std::span<const T> input, const op::premul_sum& op) {
  const std::span<T> products = scratch<T>(input.size(), 3);
  multiply_into(input, products, op.factor);
  return products;
}

}  // namespace chorus::collective
