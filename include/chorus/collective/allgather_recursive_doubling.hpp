// Recursive-doubling allgather for any rank count (Bruck's algorithm): in
// round k each rank sends everything it has gathered so far to the rank 2^k
// below it and receives as much from the rank 2^k above, so the gathered run
// doubles each round; a final rotation puts blocks in rank order.
//
// Cost: ceil(log2 n) alpha + (n-1)/n S beta (+ one local copy of S).
// Chosen for small messages.
#pragma once

#include <chorus/collective/algorithm_list.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/local_steps.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::collective {

// `data` holds n blocks of `block` elements; this rank's own block is
// filled. `steps` says where the local copies run (local_steps.hpp).
template <class X, class A, class Steps = host_steps>
void allgather_recursive_doubling(X& ex, std::span<A> data, std::size_t block, const Steps& steps = {}) {
  const int n = ex.size(), rank = ex.rank();
  if (n == 1 || block == 0) return;
  // gathered[i] is the block of rank (rank + i) mod n.
  const std::span<A> gathered = steps.template window<A>(data.size());
  const std::size_t below = static_cast<std::size_t>(rank) * block;  // the blocks of the ranks below this one
  steps.copy(std::span<const A>(data.subspan(below, block)), gathered.first(block));
  steps.settle();                  // the first round sends it
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
  steps.copy(std::span<const A>(gathered.first(above)), data.subspan(below));
  steps.copy(std::span<const A>(gathered.subspan(above)), data.first(below));
}

namespace algorithms {
struct allgather_recursive_doubling {
  static constexpr algorithm id = algorithm::recursive_doubling;
  static constexpr std::array<std::string_view, 1> aliases{"rd"};
  static constexpr std::string_view cost = "ceil(log2 n) alpha + (n-1)/n S beta (Bruck, any n)";
  static double seconds(const workload& w, const machine& m) {
    return cost::log2_ceil(w.ranks) * m.alpha + cost::share(w.ranks) * double(w.bytes) * m.beta;
  }
  template <class X, class A, class Steps>
  static void run(X& ex, std::span<A> all, std::size_t block, const Steps& steps) {
    collective::allgather_recursive_doubling(ex, all, block, steps);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
