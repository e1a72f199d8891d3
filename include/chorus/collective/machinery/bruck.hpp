// Bruck's allgather, recursive doubling for any rank count (the
// power-of-two form is recursive_halving.hpp's mirror). In round k each
// rank sends everything it has gathered so far to the rank 2^k below it
// and receives as much from the rank 2^k above, so the gathered run
// doubles each round; a final rotation puts blocks in rank order. The allgather's recursive doubling runs it, and so does the
// argument check of every collective (check.hpp), which sits below the
// collectives' folders.
//
// Cost: ceil(log2 n) alpha + (n-1)/n S beta (+ one local copy of S).
#pragma once

#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace chorus::collective {

// `data` holds n blocks of `block` elements; this rank's own block is
// filled. `compute` says where the local copies run (local_compute.hpp).
template <class X, class A, class Compute = host_compute>
void bruck_allgather(X& ex, std::span<A> data, std::size_t block, const Compute& compute = {}) {
  const int n = ex.size(), rank = ex.rank();
  if (n == 1 || block == 0) return;
  // gathered[i] is the block of rank (rank + i) mod n.
  const std::span<A> gathered = compute.template window<A>(data.size());
  const std::size_t below = static_cast<std::size_t>(rank) * block;  // the blocks of the ranks below this one
  compute.copy(std::span<const A>(data.subspan(below, block)), gathered.first(block));
  compute.settle();                // the first round sends it
  std::uint64_t count_rounds = 0;  // ceil(log2 n)
  for (int have = 1; have < n; have *= 2) ++count_rounds;
  const auto rounds = ex.phase(count_rounds, "doubling");
  std::uint32_t step = 0;
  for (int have = 1; have < n; have *= 2, ++step) {
    const int count = std::min(have, n - have);
    ex.sendrecv(std::span<const A>(gathered.first(static_cast<std::size_t>(count) * block)), (rank - have + n) % n,
                gathered.subspan(static_cast<std::size_t>(have) * block, static_cast<std::size_t>(count) * block),
                (rank + have) % n, rounds(step));
  }
  // Ranks rank..n-1 then 0..rank-1: two copies put them in rank order.
  const std::size_t above = data.size() - below;
  compute.copy(std::span<const A>(gathered.first(above)), data.subspan(below));
  compute.copy(std::span<const A>(gathered.subspan(above)), data.first(below));
}

}  // namespace chorus::collective
