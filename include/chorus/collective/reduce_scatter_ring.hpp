// Ring reduce-scatter: like the first half of the ring allreduce, with the
// blocks shifted so that rank r ends owning block r.
//
// Cost: (n-1) alpha + (n-1)/n S beta + (n-1)/n S gamma for S = n * block.
// Chosen for large messages.
#pragma once

#include <chorus/collective/exchange.hpp>
#include <chorus/collective/scratch.hpp>
#include <chorus/collective/reduce_local.hpp>

#include <span>
#include <vector>

namespace chorus::collective {

// `data` holds n blocks of `block` elements and is used as the work buffer;
// on return block `rank` holds the reduction over all ranks.
template <class X, class A, class Op>
void reduce_scatter_ring(X& ex, std::span<A> data, std::size_t block, const Op& op) {
  const int n = ex.size(), rank = ex.rank();
  const auto part = [&](int b) { return data.subspan(static_cast<std::size_t>(((b % n) + n) % n) * block, block); };
  const std::span<A> scratch = collective::scratch<A>(block);
  const auto hops = ex.phase(static_cast<std::uint64_t>(n - 1), "ring hops");
  for (int step = 0; step + 1 < n; ++step) {
    ex.sendrecv(std::span<const A>(part(rank - step - 1)), (rank + 1) % n, scratch,
                (rank - 1 + n) % n, hops(static_cast<std::uint64_t>(step)));
    reduce_into(part(rank - step - 2), std::span<const A>(scratch), op, true);
  }
}

}  // namespace chorus::collective
