// Binomial-tree allreduce: reduce to rank 0 (reduce_tree.hpp), then
// broadcast from it (broadcast_tree.hpp).
//
// Cost: 2 ceil(log2 n) (alpha + S beta) + log2(n) S gamma: never
// bandwidth-optimal, and the root works hardest. Offered for comparison and
// for transports where point-to-point latency varies a lot; the decision
// table picks it only where it measured fastest.
//
// Only the root computes the result, so every rank gets the same bits.
// `steps` says where the reductions run (local_steps.hpp).
#pragma once

#include <chorus/collective/algorithm_list.hpp>
#include <chorus/collective/broadcast_tree.hpp>
#include <chorus/collective/reduce_tree.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>

namespace chorus::collective {

template <class X, class A, class Op, class Steps = host_steps>
void allreduce_tree(X& ex, std::span<A> data, const Op& op, const Steps& steps = {}) {
  reduce_tree(ex, data, 0, op, steps);
  if (ex.rank() == 0) {
    steps.finalize(data, op, static_cast<std::size_t>(ex.size()));
    steps.settle();  // before the broadcast reads it
  }
  broadcast_tree(ex, data, 0);
}

namespace algorithms {
struct allreduce_tree {
  static constexpr algorithm id = algorithm::tree;
  static constexpr std::string_view cost = "2 ceil(log2 n) (alpha + S beta) + log2(n) S gamma";
  static double seconds(const workload& w, const machine& m) {
    const double S = double(w.bytes);
    return 2 * cost::log2_ceil(w.ranks) * (m.alpha + S * m.beta) + cost::log2_ceil(w.ranks) * S * m.gamma;
  }
  template <class X, class A, class Op, class Steps>
  static void run(X& ex, std::span<A> data, const Op& op, staging_hooks*, const Steps& steps) {
    collective::allreduce_tree(ex, data, op, steps);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
