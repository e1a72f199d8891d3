// Ring allgather: in step s every rank passes block r-s to its right
// neighbour and receives block r-s-1 from its left.
//
// Cost: (n-1) alpha + (n-1)/n S beta for S = n * block bytes. Chosen for
// large messages.
#pragma once

#include <chorus/collective/exchange.hpp>

#include <span>

namespace chorus::collective {

// `data` holds n blocks of `block` elements; this rank's own block is filled.
template <class X, class A>
void allgather_ring(X& ex, std::span<A> data, std::size_t block) {
  const int n = ex.size(), rank = ex.rank();
  const auto part = [&](int b) { return data.subspan(static_cast<std::size_t>(((b % n) + n) % n) * block, block); };
  const auto hops = ex.phase(static_cast<std::uint64_t>(n - 1), "ring hops");
  for (int step = 0; step + 1 < n; ++step)
    ex.sendrecv(std::span<const A>(part(rank - step)), (rank + 1) % n, part(rank - step - 1), (rank - 1 + n) % n,
                hops(static_cast<std::uint64_t>(step)));
}

}  // namespace chorus::collective
