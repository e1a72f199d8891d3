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

// Lanes per block of the kernel below. The block goes through a local array
// so the compiler knows the loads happen before the stores: without that,
// GCC at -O2 (its "very cheap" vectoriser) will not version the loop for
// possible aliasing and the reduction runs scalar, 3-4x slower.
inline constexpr std::size_t reduce_lanes = 16;

// accumulate[i] = incoming_is_lower ? op(incoming[i], accumulate[i]) : op(accumulate[i], incoming[i])
template <class A, class Op>
void reduce_into(std::span<A> accumulate, std::span<const A> incoming, const Op& op, bool incoming_is_lower) {
  A* out = accumulate.data();
  const A* in = incoming.data();
  const std::size_t n = accumulate.size();
  const auto combine = [&](A mine, A theirs) { return incoming_is_lower ? op(theirs, mine) : op(mine, theirs); };
  std::size_t i = 0;
  for (; i + reduce_lanes <= n; i += reduce_lanes) {
    A block[reduce_lanes];
    if (incoming_is_lower) {
      for (std::size_t k = 0; k < reduce_lanes; ++k) block[k] = op(in[i + k], out[i + k]);
    } else {
      for (std::size_t k = 0; k < reduce_lanes; ++k) block[k] = op(out[i + k], in[i + k]);
    }
    for (std::size_t k = 0; k < reduce_lanes; ++k) out[i + k] = block[k];
  }
  for (; i < n; ++i) out[i] = combine(out[i], in[i]);
}

// out[i] = op(...op(op(inputs[0][i], inputs[1][i]), inputs[2][i])..., inputs[k-1][i]):
// k contributions folded in their order (rank order: the same bits wherever
// it runs), each lane block kept in registers, so `out` may be one of the
// inputs and every input is read once.
template <class A, class Op>
void reduce_many(std::span<A> out, std::span<const A* const> inputs, const Op& op) {
  const std::size_t n = out.size(), k = inputs.size();
  A* target = out.data();
  std::size_t i = 0;
  for (; i + reduce_lanes <= n; i += reduce_lanes) {
    A block[reduce_lanes];
    for (std::size_t lane = 0; lane < reduce_lanes; ++lane) block[lane] = inputs[0][i + lane];
    for (std::size_t j = 1; j < k; ++j) {
      const A* in = inputs[j] + i;
      for (std::size_t lane = 0; lane < reduce_lanes; ++lane) block[lane] = op(block[lane], in[lane]);
    }
    for (std::size_t lane = 0; lane < reduce_lanes; ++lane) target[i + lane] = block[lane];
  }
  for (; i < n; ++i) {
    A value = inputs[0][i];
    for (std::size_t j = 1; j < k; ++j) value = op(value, inputs[j][i]);
    target[i] = value;
  }
}

template <class A, class Op>
void finalize_all(std::span<A> values, const Op& op, std::size_t contributions) {
  if constexpr (requires { op.finalize(values[0], contributions); })
    for (A& value : values) value = op.finalize(value, contributions);
}

}  // namespace chorus::collective
