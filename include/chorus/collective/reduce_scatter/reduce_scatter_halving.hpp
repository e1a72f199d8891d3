// Recursive-halving reduce-scatter (recursive_halving.hpp) for any rank
// count: non-power-of-two groups fold first, each participant's super-block
// being the blocks of the ranks folded into it, and the odd rank of a folded
// pair hands the even one its block at the end.
//
// Cost: log2(p) alpha + (p-1)/p S beta + (p-1)/p S gamma, plus
// 2 alpha + S beta + block beta on folded ranks. Chosen for small messages.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/fold.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/recursive_halving.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>

namespace chorus::collective {

// `data` holds n blocks of `block` elements and is the work buffer; on return
// block `rank` holds the reduction over all ranks.
template <class X, class A, class Op, class Compute = host_compute>
void reduce_scatter_by_halving(X& ex, std::span<A> data, std::size_t block, const Op& op, const Compute& compute = {}) {
  const int n = ex.size(), rank = ex.rank();
  if (n == 1) return;
  const folding shape(n, rank);
  const std::span<A> scratch = compute.template window<A>(data.size());
  // Both fold phases first: the ranks that sit out reserve nothing else.
  const auto in = ex.phase(1, "fold in"), back = ex.phase(1, "hand back");
  fold_in(ex, shape, std::span<const A>(data), data, scratch, op, in(0), compute);
  if (!shape.sits_out()) {
    const auto bounds = [&](int participant) {  // the first block of participant's ranks; the end after the last
      if (participant == shape.participants) return data.size();
      return static_cast<std::size_t>(participant < shape.remainder ? 2 * participant : participant + shape.remainder) *
             block;
    };
    halving_reduce_scatter(ex, shape, std::span<const A>(data), data, scratch, bounds, op, compute);
  }
  const std::span<A> even_block = data.subspan(static_cast<std::size_t>(rank - rank % 2) * block, block);
  if (shape.paired) {
    if (shape.sits_out())
      ex.recv(even_block, rank + 1, back(0));
    else
      ex.send(std::span<const A>(even_block), rank - 1, back(0));
  }
}

namespace algorithms {
struct reduce_scatter_halving {
  static constexpr algorithm id = algorithm::recursive_halving;
  static constexpr std::string_view cost = "log2(p) alpha + (p-1)/p S beta + (p-1)/p S gamma, + folding";
  static double seconds(const workload& w, const machine& m) {
    const double S = double(w.bytes), part = cost::share(cost::power_of_two_below(w.ranks));
    return cost::log2_floor(w.ranks) * m.alpha + part * S * (m.beta + m.gamma) + cost::folding(w, m);
  }
  template <class X, class A, class Op, class Compute>
  static void run(X& ex, std::span<A> work, std::size_t block, const Op& op, const Compute& compute) {
    collective::reduce_scatter_by_halving(ex, work, block, op, compute);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
