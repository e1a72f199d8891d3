// Gather's algorithms: its list, its defaults and its dispatch.
//
// Defaults: the linear gather, the one algorithm it has.
//
// Adding an algorithm: its header (its type, as algorithm_list.hpp says)
// and a line in the list below; a default rule if the sweep says it wins
// somewhere (else the cost model weighs it where no rule matches).
#pragma once

#include <chorus/collective/gather/gather_linear.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/core/element_type.hpp>

#include <span>
#include <string_view>

namespace chorus::collective {

struct gather_algorithms : algorithm_list<algorithms::gather_linear> {
  static constexpr std::string_view collective = "gather";
  static constexpr std::string_view defaults = "gather:0-:linear";
};

// Runs the algorithm `chosen` over `ex` (an exchange, or a network_exchange
// on the direct path) to the root, every block in rank order; `compute` copies the root's own block.
template <class X, class Communicator, element T, class Compute = host_compute>
void gather_by(X& ex, Communicator& comm, std::span<const T> mine, std::span<T> all, int root, algorithm chosen,
               const Compute& compute = {}) {
  gather_algorithms::run_with("gather", chosen, ex, comm, mine, all, root, compute);
}

}  // namespace chorus::collective
