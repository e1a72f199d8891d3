// Scatter's algorithms: its list, its defaults and its dispatch.
//
// Defaults: the linear scatter, the one algorithm it has.
//
// Adding an algorithm: its header (its type, as algorithm_list.hpp says)
// and a line in the list below; a default rule if the sweep says it wins
// somewhere (else the cost model weighs it where no rule matches).
#pragma once

#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/collective/scatter/scatter_linear.hpp>
#include <chorus/core/element_type.hpp>

#include <span>
#include <string_view>

namespace chorus::collective {

struct scatter_algorithms : algorithm_list<algorithms::scatter_linear> {
  static constexpr std::string_view collective = "scatter";
  static constexpr std::string_view defaults = "scatter:0-:linear";
};

// Runs the algorithm `chosen` over `ex` (an exchange, or a network_exchange
// on the direct path) from the root, block r to rank r; `compute` copies the root's own block.
template <class X, class Communicator, element T, class Compute = host_compute>
void scatter_by(X& ex, Communicator& comm, std::span<const T> all, std::span<T> mine, int root, algorithm chosen,
                const Compute& compute = {}) {
  scatter_algorithms::run_with("scatter", chosen, ex, comm, all, mine, root, compute);
}

}  // namespace chorus::collective
