// Broadcast's algorithms: its list, its defaults and its dispatch.
//
// Defaults: shared memory inside one host and the hierarchical form across
// hosts of several ranks from 16 KiB; over the network the binomial tree
// through 256 KiB (and always at 2 ranks, where it is one message), the
// pipelined chain from 512 KiB (the next measured size).
//
// Adding an algorithm: its header (its type, as algorithm_list.hpp says)
// and a line in the list below; a default rule if the sweep says it wins
// somewhere (else the cost model weighs it where no rule matches).
#pragma once

#include <chorus/collective/broadcast/broadcast_chain.hpp>
#include <chorus/collective/broadcast/broadcast_hierarchical.hpp>
#include <chorus/collective/broadcast/broadcast_shared_memory.hpp>
#include <chorus/collective/broadcast/broadcast_tree.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/collective/machinery/subgroup_exchange.hpp>
#include <chorus/core/element_type.hpp>

#include <cstddef>
#include <span>
#include <string_view>

namespace chorus::collective {

struct broadcast_algorithms : algorithm_list<algorithms::broadcast_tree, algorithms::broadcast_chain,
                                             algorithms::broadcast_shared_memory, algorithms::broadcast_hierarchical> {
  static constexpr std::string_view collective = "broadcast";
  static constexpr std::string_view defaults =
      "broadcast@2-:16K-:shared_memory,16K-:hierarchical;broadcast@1-2:0-:tree;broadcast@3-:0-512K:tree,512K-:chain";
};

// Runs the algorithm `chosen` over `ex` (an exchange, a network_exchange
// on the direct path, or a group inside a hierarchical broadcast): the
// algorithms only send and receive parts of `data`.
template <class X, class A>
void broadcast_by(X& ex, std::span<A> data, int root, algorithm chosen) {
  broadcast_algorithms::run_with("broadcast", chosen, ex, data, root);
}

template <class X, class A>
void broadcast_between_hosts(X& ex, std::span<const int> members, std::span<A> data, int root) {
  subgroup_exchange<X> group(ex, members);
  if (group.size() == 1) return;
  const choice made =
      choose_between_hosts(ex.comm(), entry_of<broadcast_algorithms>(), group.size(), data.size_bytes());
  report(ex.comm(), "broadcast", data.size_bytes(), dtype_of<A>, made, group.size());
  broadcast_by(group, data, root, made.chosen);
}

}  // namespace chorus::collective
