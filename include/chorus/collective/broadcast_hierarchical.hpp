// Hierarchical broadcast: the network only between hosts, shared memory
// inside each.
//
// The root's peers with its local rank, one per host, get the data over the
// network (binomial tree or chain, by the table for h ranks); then each of
// them broadcasts it through its host's shared memory.
//
// Cost, S bytes: the network carries S into each host once (a flat tree or
// chain sends it to every rank); plus the shared-memory steps. Chosen when
// the ranks span several hosts holding equal numbers (> 1) of ranks, from
// 16 KiB.
#pragma once

#include <chorus/collective/broadcast_chain.hpp>
#include <chorus/collective/broadcast_shared_memory.hpp>
#include <chorus/collective/broadcast_tree.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/collective/subgroup_exchange.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace chorus::collective {

template <class X, class A>
void broadcast_over_network(X& ex, std::span<const int> members, std::span<A> data, int root) {
  subgroup_exchange<X> group(ex, members);
  if (group.size() == 1) return;
  if (tables::broadcast_over_network({group.size(), data.size_bytes()}) == algorithm::chain)
    broadcast_chain(group, data, root);
  else
    broadcast_tree(group, data, root);
}

template <class Communicator, class A>
void broadcast_hierarchical(exchange<Communicator>& ex, std::span<A> data, int root) {
  const host_layout& layout = ex.comm().layout();
  int root_host = 0;
  while (std::find(layout.members[static_cast<std::size_t>(root_host)].begin(),
                   layout.members[static_cast<std::size_t>(root_host)].end(),
                   root) == layout.members[static_cast<std::size_t>(root_host)].end())
    ++root_host;
  const auto& root_members = layout.members[static_cast<std::size_t>(root_host)];
  const int root_local =
      static_cast<int>(std::find(root_members.begin(), root_members.end(), root) - root_members.begin());
  // First, so that every rank reserves the setup phase at the same place
  // (only the root's local peers take part in the network's phases).
  shared_memory_call call(ex, layout.local,
                          steps_for(data.size(), shared_memory_channel::default_slot_bytes / sizeof(A)),
                          data.size_bytes());
  if (layout.local_rank == root_local) broadcast_over_network(ex, layout.across, data, root_host);
  broadcast_in_host(call, data, root_local);
}

}  // namespace chorus::collective
