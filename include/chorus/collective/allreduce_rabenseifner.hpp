// Rabenseifner's allreduce: recursive-halving reduce-scatter, then
// recursive-doubling allgather (recursive_halving.hpp); non-power-of-two
// groups fold first (fold.hpp).
//
// Cost: 2 log2(p) alpha + 2 (p-1)/p S beta + (p-1)/p S gamma, plus
// 2 (alpha + S beta) on folded ranks. Bandwidth-optimal like the ring with
// log instead of linear latency: chosen for medium and large messages when
// the rank count makes the ring's 2(n-1) latency terms hurt.
//
// Each super-block is finished by one rank, so all ranks agree bitwise.
#pragma once

#include <chorus/collective/scratch.hpp>

#include <chorus/collective/blocks.hpp>
#include <chorus/collective/fold.hpp>
#include <chorus/collective/recursive_halving.hpp>

#include <span>
#include <vector>

namespace chorus::collective {

template <class X, class A, class Op>
void allreduce_rabenseifner(X& ex, std::span<A> data, const Op& op) {
  const int n = ex.size();
  if (n > 1 && !data.empty()) {
    const std::span<A> scratch = collective::scratch<A>(data.size());
    folded(ex, data, scratch, op, [&](const folding& shape) {
      const auto parts = static_cast<std::size_t>(shape.participants);
      const block_partition blocks{data.size(), parts};
      std::vector<std::size_t> bounds(parts + 1);
      for (std::size_t i = 0; i <= parts; ++i) bounds[i] = blocks.offset(i);
      halving_reduce_scatter(ex, shape, data, scratch, bounds, op);
      const auto own = static_cast<std::size_t>(shape.participant);
      finalize_all(data.subspan(bounds[own], blocks.size(own)), op, static_cast<std::size_t>(n));
      doubling_allgather(ex, shape, data, bounds);
    });
    return;
  }
  finalize_all(data, op, static_cast<std::size_t>(n));
}

}  // namespace chorus::collective
