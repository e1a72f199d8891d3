// The local reduction kernel: combine an incoming block into an accumulating
// one. The operand order is fixed by rank (the lower rank's contribution is
// always the left operand), so that two ranks combining the same pair of
// blocks get the same bits even for operators that are only commutative up
// to rounding.
#pragma once

#include <chorus/core/reduce_op.hpp>

#include <cstddef>
#include <span>

namespace chorus::collective {

// accumulate[i] = incoming_is_lower ? op(incoming[i], accumulate[i]) : op(accumulate[i], incoming[i])
template <class A, class Op>
void reduce_into(std::span<A> accumulate, std::span<const A> incoming, const Op& op, bool incoming_is_lower) {
  A* out = accumulate.data();
  const A* in = incoming.data();
  const std::size_t n = accumulate.size();
  if (incoming_is_lower) {
    for (std::size_t i = 0; i < n; ++i) out[i] = op(in[i], out[i]);
  } else {
    for (std::size_t i = 0; i < n; ++i) out[i] = op(out[i], in[i]);
  }
}

template <class A, class Op>
void finalize_all(std::span<A> values, const Op& op, std::size_t contributions) {
  if constexpr (requires { op.finalize(values[0], contributions); })
    for (A& value : values) value = op.finalize(value, contributions);
}

}  // namespace chorus::collective
