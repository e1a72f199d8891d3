// Binomial-tree allreduce: reduce to rank 0 (reduce_tree.hpp), then
// broadcast from it (broadcast_tree.hpp).
//
// Cost: 2 ceil(log2 n) (alpha + S beta) + log2(n) S gamma: never
// bandwidth-optimal, and the root works hardest. Offered for comparison and
// for transports where point-to-point latency varies a lot; the decision
// table picks it only where it measured fastest.
//
// Only the root computes the result, so every rank gets the same bits.
// `compute` says where the reductions run (local_compute.hpp).
#pragma once

#include <chorus/collective/broadcast/broadcast_tree.hpp>
#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/reduce/reduce_tree.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>

namespace chorus::collective {

template <class X, class A, class Op, class Compute = host_compute>
void allreduce_by_tree(X& ex, std::span<A> data, const Op& op, const Compute& compute = {}) {
  reduce_by_tree(ex, data, 0, op, compute);
  if (ex.rank() == 0) {
    compute.finalize(data, op, static_cast<std::size_t>(ex.size()));
    compute.settle();  // before the broadcast reads it
  }
  broadcast_by_tree(ex, data, 0);
}

namespace algorithms {
struct allreduce_tree {
  static constexpr algorithm id = algorithm::tree;
  static constexpr std::string_view cost = "2 ceil(log2 n) (alpha + S beta) + log2(n) S gamma";
  static double seconds(const workload& w, const machine& m) {
    const double S = double(w.bytes);
    return 2 * cost::log2_ceil(w.ranks) * (m.alpha + S * m.beta) + cost::log2_ceil(w.ranks) * S * m.gamma;
  }
  template <class X, class A, class Op, class Compute>
  static void run(X& ex, std::span<A> data, const Op& op, staging_hooks*, const Compute& compute) {
    collective::allreduce_by_tree(ex, data, op, compute);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
