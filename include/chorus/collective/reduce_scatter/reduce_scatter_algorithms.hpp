// Reduce_scatter's algorithms: its list, its defaults and its dispatch.
//
// Defaults (bytes: all n blocks of input): shared memory inside one host
// and the hierarchical form across hosts of several ranks from 16 KiB;
// over the network recursive halving through 64 KiB, the pipelined ring
// from 128 KiB (the next measured size).
//
// Adding an algorithm: its header (its type, as algorithm_list.hpp says)
// and a line in the list below; a default rule if the sweep says it wins
// somewhere (else the cost model weighs it where no rule matches).
#pragma once

#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/collective/machinery/subgroup_exchange.hpp>
#include <chorus/collective/reduce_scatter/reduce_scatter_halving.hpp>
#include <chorus/collective/reduce_scatter/reduce_scatter_hierarchical.hpp>
#include <chorus/collective/reduce_scatter/reduce_scatter_ring.hpp>
#include <chorus/collective/reduce_scatter/reduce_scatter_shared_memory.hpp>
#include <chorus/core/element_type.hpp>

#include <cstddef>
#include <span>
#include <string_view>

namespace chorus::collective {

struct reduce_scatter_algorithms
    : algorithm_list<algorithms::reduce_scatter_halving, algorithms::reduce_scatter_ring,
                     algorithms::reduce_scatter_shared_memory, algorithms::reduce_scatter_hierarchical> {
  static constexpr std::string_view collective = "reduce_scatter";
  static constexpr std::string_view defaults =
      "reduce_scatter@2-:16K-:shared_memory,16K-:hierarchical;reduce_scatter:0-128K:recursive_halving,128K-:ring";
};

// Runs the algorithm `chosen` over `ex` (an exchange, a network_exchange
// on the direct path, or a group inside a hierarchical reduce_scatter), its
// reductions where `compute` says.
template <class X, class A, class Op, class Compute = host_compute>
void reduce_scatter_by(X& ex, std::span<A> work, std::size_t block, const Op& op, algorithm chosen,
                       const Compute& compute = {}) {
  reduce_scatter_algorithms::run_with("reduce_scatter", chosen, ex, work, block, op, compute);
}

template <class X, class A, class Op>
void reduce_scatter_between_hosts(X& ex, std::span<const int> members, std::span<A> data, std::size_t block,
                                  const Op& op) {
  subgroup_exchange<X> group(ex, members);
  const choice made =
      choose_between_hosts(ex.comm(), entry_of<reduce_scatter_algorithms>(), group.size(), data.size_bytes());
  report(ex.comm(), "reduce_scatter", data.size_bytes(), dtype_of<A>, made, group.size());
  reduce_scatter_by(group, data, block, op, made.chosen);
}

}  // namespace chorus::collective
