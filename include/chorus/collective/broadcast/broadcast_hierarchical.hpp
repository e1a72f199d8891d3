// Hierarchical broadcast: the network only between hosts, shared memory
// inside each.
//
// The root's peers with its local rank, one per host, get the data over the
// network (binomial tree or chain, chosen as any broadcast over h ranks is); then each of
// them broadcasts it through its host's shared memory.
//
// Cost, S bytes: the network carries S into each host once (a flat tree or
// chain sends it to every rank); plus the shared-memory steps. Chosen when
// the ranks span several hosts holding equal numbers (> 1) of ranks, from
// 16 KiB.
#pragma once

#include <chorus/collective/broadcast/broadcast_shared_memory.hpp>
#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/record/trace.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::collective {

// The ranks `members` of `ex`, one on each host, broadcast `data` from
// `root` over the network, chosen as any broadcast over that many ranks is
// (CHORUS_TUNE reaches it).
template <class X, class A>
void broadcast_between_hosts(X& ex, std::span<const int> members, std::span<A> data,
                             int root);  // over broadcast's list: broadcast_algorithms.hpp

template <class Communicator, class A>
void broadcast_by_hosts(exchange<Communicator>& ex, std::span<A> data, int root) {
  const host_layout& layout = ex.comm().layout();
  const host_groups& hosts = *layout.members;
  int root_host = 0;
  while (std::find(hosts[static_cast<std::size_t>(root_host)].begin(), hosts[static_cast<std::size_t>(root_host)].end(),
                   root) == hosts[static_cast<std::size_t>(root_host)].end())
    ++root_host;
  const auto& root_members = hosts[static_cast<std::size_t>(root_host)];
  const int root_local =
      static_cast<int>(std::find(root_members.begin(), root_members.end(), root) - root_members.begin());
  // First, so that every rank reserves the setup phase at the same place
  // (only the root's local peers take part in the network's phases).
  shared_memory_call call(ex, layout.local,
                          steps_for(data.size(), shared_memory_channel::default_slot_bytes / sizeof(A)),
                          data.size_bytes());
  if (layout.local_rank == root_local) {
    const record::phase phase("hierarchical: between hosts");
    broadcast_between_hosts(ex, layout.across, data, root_host);
  }
  const record::phase phase("hierarchical: share in host");
  broadcast_in_host(call, data, root_local);
}

namespace algorithms {
struct broadcast_hierarchical : hierarchical_form {
  static constexpr std::string_view cost =
      "tree or chain among the root's local peers on each host (S into each host once), then shared memory";
  static double seconds(const workload& w, const machine& m) {
    const double S = double(w.bytes);
    return cost::log2_ceil(std::max(w.hosts, 1)) * (m.alpha + S * m.beta) + cost::memory_steps(w.bytes) * m.flag +
           S * m.memory_beta;
  }
  template <class Communicator, class A>
  static void run(exchange<Communicator>& ex, std::span<A> data, int root)
    requires knows_its_hosts<Communicator>
  {
    collective::broadcast_by_hosts(ex, data, root);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
