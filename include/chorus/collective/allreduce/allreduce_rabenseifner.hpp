// Rabenseifner's allreduce: recursive-halving reduce-scatter, then
// recursive-doubling allgather (recursive_halving.hpp); non-power-of-two
// groups fold first (fold.hpp).
//
// Cost: 2 log2(p) alpha + 2 (p-1)/p S beta + (p-1)/p S gamma, plus
// 2 (alpha + S beta) on folded ranks. Bandwidth-optimal like the ring with
// log instead of linear latency: chosen for medium and large messages when
// the rank count makes the ring's 2(n-1) latency terms hurt.
//
// Each super-block is finished by one rank, so all ranks agree bitwise.
// `compute` says where the reductions run (local_compute.hpp: the host, or the
// device on the direct path).
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/block_partition.hpp>
#include <chorus/collective/machinery/fold.hpp>
#include <chorus/collective/machinery/recursive_halving.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>

namespace chorus::collective {

// `input` to `data`, which may be the same span (in place).
template <class X, class A, class Op, class Compute = host_compute>
void allreduce_by_rabenseifner(X& ex, std::span<const A> input, std::span<A> data, const Op& op,
                               const Compute& compute = {}) {
  const int n = ex.size();
  if (n > 1 && !data.empty()) {
    const std::span<A> scratch = compute.template window<A>(data.size());
    folded(
        ex, input, data, scratch, op,
        [&](const folding& shape, std::span<const A> mine) {
          const auto parts = static_cast<std::size_t>(shape.participants);
          const block_partition blocks{data.size(), parts};
          const auto bounds = [&](int part) { return blocks.offset(static_cast<std::size_t>(part)); };
          halving_reduce_scatter(ex, shape, mine, data, scratch, bounds, op, compute);
          const auto own = static_cast<std::size_t>(shape.participant);
          compute.finalize(data.subspan(blocks.offset(own), blocks.size(own)), op, static_cast<std::size_t>(n));
          compute.settle();  // the allgather sends it
          doubling_allgather(ex, shape, data, bounds);
        },
        compute);
    return;
  }
  compute.copy(input, data);
  compute.finalize(data, op, static_cast<std::size_t>(n));
}

namespace algorithms {
struct allreduce_rabenseifner {
  static constexpr algorithm id = algorithm::rabenseifner;
  static constexpr std::string_view cost =
      "2 log2(p) alpha + 2 (p-1)/p S beta + (p-1)/p S gamma, + 2 (alpha + S beta) folding";
  static double seconds(const workload& w, const machine& m) {
    const double S = double(w.bytes), part = cost::share(cost::power_of_two_below(w.ranks));
    return 2 * cost::log2_floor(w.ranks) * m.alpha + 2 * part * S * m.beta + part * S * m.gamma + cost::folding(w, m);
  }
  template <class X, class A, class Op, class Compute>
  static void run(X& ex, std::span<const A> input, std::span<A> data, const Op& op, staging_hooks*,
                  const Compute& compute) {
    collective::allreduce_by_rabenseifner(ex, input, data, op, compute);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
