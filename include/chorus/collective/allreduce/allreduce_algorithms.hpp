// Allreduce's algorithms: its list, its defaults and its dispatch.
//
// Defaults (bench/sweep writes them; docs/decision_table.md has the sweeps
// behind each rule): inside one host the one-slot shared-memory form for
// small messages (one flag wait per call) and the chunked one above, where
// reducing only a 1/n share pays for the extra flags; across hosts holding
// several ranks each the hierarchical form. Over the network latency
// dominates small messages, where recursive doubling's log2(n) rounds win;
// above, 2 ranks take the ring (pipelined segments beat one big swap), 3+
// Rabenseifner (bandwidth-optimal with log(n) latency where the ring pays
// 2(n-1)) and, for the largest, the ring, whose pipelining keeps both
// directions busy.
//
// Adding an algorithm: its header (its type, as algorithm_list.hpp says)
// and a line in the list below; a default rule if the sweep says it wins
// somewhere (else the cost model weighs it where no rule matches).
#pragma once

#include <chorus/collective/allreduce/allreduce_hierarchical.hpp>
#include <chorus/collective/allreduce/allreduce_rabenseifner.hpp>
#include <chorus/collective/allreduce/allreduce_recursive_doubling.hpp>
#include <chorus/collective/allreduce/allreduce_ring.hpp>
#include <chorus/collective/allreduce/allreduce_shared_memory.hpp>
#include <chorus/collective/allreduce/allreduce_shared_memory_small.hpp>
#include <chorus/collective/allreduce/allreduce_tree.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/collective/machinery/subgroup_exchange.hpp>
#include <chorus/core/element_type.hpp>

#include <cstddef>
#include <span>
#include <string_view>

namespace chorus::collective {

struct allreduce_algorithms
    : algorithm_list<algorithms::allreduce_recursive_doubling, algorithms::allreduce_rabenseifner,
                     algorithms::allreduce_ring, algorithms::allreduce_tree, algorithms::allreduce_shared_memory,
                     algorithms::allreduce_shared_memory_small, algorithms::allreduce_hierarchical> {
  static constexpr std::string_view collective = "allreduce";
  static constexpr std::string_view defaults =
      "allreduce@2-:0-16K:shared_memory_small,16K-:shared_memory,16K-:hierarchical;allreduce@1:0-:recursive_doubling;"
      "allreduce@2:0-8K:recursive_doubling,8K-:ring;"
      "allreduce@3-:0-16K:recursive_doubling,16K-2M:rabenseifner,2M-:ring";
};

// Runs the algorithm `chosen` over `ex` (an exchange, a network_exchange
// on the direct path, or a group inside a hierarchical allreduce), its
// reductions where `compute` says, from `input` into `work` (the same span
// in place). An algorithm with an out-of-place form (its run takes both)
// reads the input where it is; the others (the tree) get it copied into
// `work` first.
template <class X, class A, class Op, class Compute = host_compute>
void allreduce_by(X& ex, std::span<const A> input, std::span<A> work, const Op& op, algorithm chosen,
                  staging_hooks* hooks, const Compute& compute = {}) {
  allreduce_algorithms::run("allreduce", chosen, [&]<class Algorithm>() {
    if constexpr (requires { Algorithm::run(ex, input, work, op, hooks, compute); }) {
      Algorithm::run(ex, input, work, op, hooks, compute);
    } else if constexpr (requires { Algorithm::run(ex, work, op, hooks, compute); }) {
      compute.copy(input, work);
      Algorithm::run(ex, work, op, hooks, compute);
    } else {
      cannot_run_here<Algorithm>("allreduce");
    }
  });
}

template <class X, class A, class Op, class Compute = host_compute>
void allreduce_by(X& ex, std::span<A> data, const Op& op, algorithm chosen, staging_hooks* hooks,
                  const Compute& compute = {}) {
  allreduce_by(ex, std::span<const A>(data), data, op, chosen, hooks, compute);
}

template <class X, class A, class Op>
void allreduce_between_hosts(X& ex, std::span<const int> members, std::span<A> data, const Op& op) {
  subgroup_exchange<X> group(ex, members);
  const choice made =
      choose_between_hosts(ex.comm(), entry_of<allreduce_algorithms>(), group.size(), data.size_bytes());
  report(ex.comm(), "allreduce", data.size_bytes(), dtype_of<A>, made, group.size());
  allreduce_by(group, data, op, made.chosen, nullptr);
}

}  // namespace chorus::collective
