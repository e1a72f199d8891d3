// Recursive-doubling allgather for any rank count (Bruck's algorithm): in
// round k each rank sends everything it has gathered so far to the rank 2^k
// below it and receives as much from the rank 2^k above, so the gathered run
// doubles each round; a final rotation puts blocks in rank order.
//
// Cost: ceil(log2 n) alpha + (n-1)/n S beta (+ one local copy of S).
// Chosen for small messages.
#pragma once

#include <chorus/collective/exchange.hpp>
#include <chorus/collective/scratch.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace chorus::collective {

// `data` holds n blocks of `block` elements; this rank's own block is filled.
template <class X, class A>
void allgather_recursive_doubling(X& ex, std::span<A> data, std::size_t block) {
  const int n = ex.size(), rank = ex.rank();
  if (n == 1 || block == 0) return;
  // gathered[i] is the block of rank (rank + i) mod n.
  const std::span<A> gathered = collective::scratch<A>(data.size());
  const auto own = data.subspan(static_cast<std::size_t>(rank) * block, block);
  std::copy(own.begin(), own.end(), gathered.begin());
  std::uint64_t count_rounds = 0;  // ceil(log2 n)
  for (int have = 1; have < n; have *= 2) ++count_rounds;
  const auto rounds = ex.phase(count_rounds, "doubling");
  std::uint32_t step = 0;
  for (int have = 1; have < n; have *= 2, ++step) {
    const int count = std::min(have, n - have);
    const std::span<A> all = gathered;
    ex.sendrecv(std::span<const A>(all.first(static_cast<std::size_t>(count) * block)), (rank - have + n) % n,
                all.subspan(static_cast<std::size_t>(have) * block, static_cast<std::size_t>(count) * block),
                (rank + have) % n, rounds(step));
  }
  for (int i = 0; i < n; ++i) {
    const auto from = gathered.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i) * block);
    std::copy(from, from + static_cast<std::ptrdiff_t>(block),
              data.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>((rank + i) % n) * block));
  }
}

}  // namespace chorus::collective
