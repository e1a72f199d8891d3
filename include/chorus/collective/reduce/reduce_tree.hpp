// Binomial-tree reduce to a root: a rank whose relative number has bit k set
// sends its partial result 2^k down and stops; the others receive from 2^k
// up and combine.
//
// Cost: ceil(log2 n) (alpha + S beta + S gamma). Used by reduce and by the
// tree allreduce. `compute` says where the reductions run (local_compute.hpp:
// the host, or the device on the direct path).
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::collective {

template <class X, class A, class Op, class Compute = host_compute>
void reduce_by_tree(X& ex, std::span<A> data, int root, const Op& op, const Compute& compute = {}) {
  const int n = ex.size();
  const int relative = (ex.rank() - root + n) % n;
  const auto real = [&](int r) { return (r + root) % n; };
  const std::span<A> scratch = compute.template window<A>(data.size());
  std::uint64_t levels = 0;  // ceil(log2 n)
  for (int mask = 1; mask < n; mask <<= 1) ++levels;
  const auto level = ex.phase(levels, "tree reduce");
  std::uint32_t depth = 0;
  for (int mask = 1; mask < n; mask <<= 1, ++depth) {
    if (relative & mask) {
      compute.settle();  // the transport reads what the reductions wrote
      ex.send(std::span<const A>(data), real(relative - mask), level(depth));
      return;
    }
    if (relative + mask < n) {
      ex.recv(scratch, real(relative + mask), level(depth));
      // The sender holds higher relative ranks: it is the right operand.
      compute.reduce(data, std::span<const A>(scratch), op, false);
      compute.settle();  // the next receive reuses the window the reduction reads
    }
  }
}

namespace algorithms {
struct reduce_tree {
  static constexpr algorithm id = algorithm::tree;
  static constexpr std::string_view cost = "ceil(log2 n) (alpha + S beta + S gamma), binomial";
  static double seconds(const workload& w, const machine& m) {
    const double S = double(w.bytes);
    return cost::log2_ceil(w.ranks) * (m.alpha + S * (m.beta + m.gamma));
  }
  template <class X, class A, class Op, class Compute>
  static void run(X& ex, std::span<A> data, int root, const Op& op, const Compute& compute) {
    collective::reduce_by_tree(ex, data, root, op, compute);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
