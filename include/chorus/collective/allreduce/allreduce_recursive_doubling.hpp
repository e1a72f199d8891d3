// Recursive doubling allreduce: in round k every participant swaps its whole
// buffer with the participant 2^k away and combines, so after log2(p) rounds
// all hold the full reduction. Non-power-of-two groups fold first (fold.hpp).
//
// Cost: log2(p) (alpha + S beta + S gamma), plus 2 (alpha + S beta) on
// folded ranks. Fewest rounds of any algorithm: chosen for small messages,
// where latency dominates.
//
// Both partners compute op(lower rank's buffer, higher rank's buffer), and
// their buffers were identical within each half, so all ranks agree bitwise.
// `compute` says where the reductions run (local_compute.hpp: the host, or the
// device on the direct path).
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/fold.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/record/trace.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::collective {

// `input` to `data`, which may be the same span (in place): the first
// round sends `input` and combines it with what arrives into `data`.
template <class X, class A, class Op, class Compute = host_compute>
void allreduce_by_recursive_doubling(X& ex, std::span<const A> input, std::span<A> data, const Op& op,
                                     const Compute& compute = {}) {
  const int n = ex.size();
  if (n > 1 && !data.empty()) {
    const std::span<A> scratch = compute.template window<A>(data.size());
    folded(
        ex, input, data, scratch, op,
        [&](const folding& shape, std::span<const A> mine) {
          const auto rounds = ex.phase(shape.rounds(), "doubling");
          std::uint32_t round = 0;
          for (int distance = 1; distance < shape.participants; distance *= 2, ++round) {
            const record::phase phase("doubling round");
            const int partner = shape.rank_of(shape.participant ^ distance);
            ex.sendrecv(mine, partner, scratch, partner, rounds(round));
            compute.reduce(data, mine, std::span<const A>(scratch), op, partner < ex.rank());
            compute.settle();  // the next round sends `data` and reuses the window
            mine = data;
          }
        },
        compute);
  } else {
    compute.copy(input, data);
  }
  compute.finalize(data, op, static_cast<std::size_t>(n));
}

namespace algorithms {
struct allreduce_recursive_doubling {
  static constexpr algorithm id = algorithm::recursive_doubling;
  static constexpr std::array<std::string_view, 1> aliases{"rd"};
  static constexpr std::string_view cost = "log2(p) (alpha + S beta + S gamma), + 2 (alpha + S beta) folding";
  static double seconds(const workload& w, const machine& m) {
    const double S = double(w.bytes);
    return cost::log2_floor(w.ranks) * (m.alpha + S * m.beta + S * m.gamma) + cost::folding(w, m);
  }
  template <class X, class A, class Op, class Compute>
  static void run(X& ex, std::span<const A> input, std::span<A> data, const Op& op, staging_hooks*,
                  const Compute& compute) {
    collective::allreduce_by_recursive_doubling(ex, input, data, op, compute);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
