// Reduce's algorithms: its list, its defaults and its dispatch.
//
// Defaults: the binomial tree, the one algorithm it has.
//
// Adding an algorithm: its header (its type, as algorithm_list.hpp says)
// and a line in the list below; a default rule if the sweep says it wins
// somewhere (else the cost model weighs it where no rule matches).
#pragma once

#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/collective/reduce/reduce_tree.hpp>

#include <span>
#include <string_view>

namespace chorus::collective {

struct reduce_algorithms : algorithm_list<algorithms::reduce_tree> {
  static constexpr std::string_view collective = "reduce";
  static constexpr std::string_view defaults = "reduce:0-:tree";
};

// Runs the algorithm `chosen` over `ex` (an exchange, or a network_exchange
// on the direct path): `data` (the accumulator's work copy) reduced into
// the root's, its reductions where `compute` says.
template <class X, class A, class Op, class Compute = host_compute>
void reduce_by(X& ex, std::span<A> data, int root, const Op& op, algorithm chosen, const Compute& compute = {}) {
  reduce_algorithms::run_with("reduce", chosen, ex, data, root, op, compute);
}

}  // namespace chorus::collective
