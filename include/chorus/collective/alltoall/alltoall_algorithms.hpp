// Alltoall's algorithms: its list, its defaults and its dispatch.
//
// Defaults: the pairwise exchange, the one algorithm it has.
//
// Adding an algorithm: its header (its type, as algorithm_list.hpp says)
// and a line in the list below; a default rule if the sweep says it wins
// somewhere (else the cost model weighs it where no rule matches).
#pragma once

#include <chorus/collective/alltoall/alltoall_pairwise.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/core/element_type.hpp>

#include <cstddef>
#include <span>
#include <string_view>

namespace chorus::collective {

struct alltoall_algorithms : algorithm_list<algorithms::alltoall_pairwise> {
  static constexpr std::string_view collective = "alltoall";
  static constexpr std::string_view defaults = "alltoall:0-:pairwise";
};

// Runs the algorithm `chosen` over `ex` (an exchange, or a network_exchange
// on the direct path): block j of `input` to rank j, block i of `output`
// from rank i; `compute` copies this rank's own block.
template <class X, element T, class Compute = host_compute>
void alltoall_by(X& ex, std::span<const T> input, std::span<T> output, std::size_t block, algorithm chosen,
                 const Compute& compute = {}) {
  alltoall_algorithms::run_with("alltoall", chosen, ex, input, output, block, compute);
}

}  // namespace chorus::collective
