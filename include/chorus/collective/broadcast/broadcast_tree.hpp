// Binomial-tree broadcast: the root sends to the ranks 2^k away (relative to
// it), each of which forwards down its own subtree.
//
// Cost: ceil(log2 n) (alpha + S beta). Chosen for small and medium messages.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>

namespace chorus::collective {

template <class X, class A>
void broadcast_by_tree(X& ex, std::span<A> data, int root) {
  const int n = ex.size();
  // One step: each rank receives once, from its parent.
  const std::uint32_t step = ex.phase(1, "tree broadcast")(0);
  const int relative = (ex.rank() - root + n) % n;
  const auto real = [&](int r) { return (r + root) % n; };
  int mask = 1;
  while (mask < n) {
    if (relative & mask) {
      ex.recv(data, real(relative - mask), step);
      break;
    }
    mask <<= 1;
  }
  std::vector<typename X::request> sends;
  for (mask >>= 1; mask > 0; mask >>= 1)
    if (relative + mask < n) sends.push_back(ex.isend(std::span<const A>(data), real(relative + mask), step));
  ex.wait_all(sends);
}

namespace algorithms {
struct broadcast_tree {
  static constexpr algorithm id = algorithm::tree;
  static constexpr std::string_view cost = "ceil(log2 n) (alpha + S beta)";
  static double seconds(const workload& w, const machine& m) {
    return cost::log2_ceil(w.ranks) * (m.alpha + double(w.bytes) * m.beta);
  }
  template <class X, class A>
  static void run(X& ex, std::span<A> data, int root) {
    collective::broadcast_by_tree(ex, data, root);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
