// Allgather's algorithms: its list, its defaults and its dispatch.
//
// Defaults (bytes: all n blocks): shared memory inside one host and the
// hierarchical form across hosts of several ranks from 16 KiB; over the
// network the log-round algorithm (Bruck) through 64 KiB, the pipelined
// ring from 128 KiB (the next measured size).
//
// Adding an algorithm: its header (its type, as algorithm_list.hpp says)
// and a line in the list below; a default rule if the sweep says it wins
// somewhere (else the cost model weighs it where no rule matches).
#pragma once

#include <chorus/collective/allgather/allgather_hierarchical.hpp>
#include <chorus/collective/allgather/allgather_recursive_doubling.hpp>
#include <chorus/collective/allgather/allgather_ring.hpp>
#include <chorus/collective/allgather/allgather_shared_memory.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/collective/machinery/subgroup_exchange.hpp>
#include <chorus/core/element_type.hpp>

#include <cstddef>
#include <span>
#include <string_view>

namespace chorus::collective {

struct allgather_algorithms : algorithm_list<algorithms::allgather_recursive_doubling, algorithms::allgather_ring,
                                             algorithms::allgather_shared_memory, algorithms::allgather_hierarchical> {
  static constexpr std::string_view collective = "allgather";
  static constexpr std::string_view defaults =
      "allgather@2-:16K-:shared_memory,16K-:hierarchical;allgather:0-128K:recursive_doubling,128K-:ring";
};

// Runs the algorithm `chosen` over `ex` (an exchange, a network_exchange
// on the direct path, or a group inside a hierarchical allgather).
template <class X, class A, class Compute = host_compute>
void allgather_by(X& ex, std::span<A> all, std::size_t block, algorithm chosen, const Compute& compute = {}) {
  allgather_algorithms::run_with("allgather", chosen, ex, all, block, compute);
}

template <class X, class A>
void allgather_between_hosts(X& ex, std::span<const int> members, std::span<A> data, std::size_t block) {
  subgroup_exchange<X> group(ex, members);
  const choice made =
      choose_between_hosts(ex.comm(), entry_of<allgather_algorithms>(), group.size(), data.size_bytes());
  report(ex.comm(), "allgather", data.size_bytes(), dtype_of<A>, made, group.size());
  allgather_by(group, data, block, made.chosen);
}

}  // namespace chorus::collective
