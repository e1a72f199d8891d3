// Hierarchical allgather: the network only between hosts, shared memory
// inside each.
//
// With h hosts of L ranks each: (1) the h ranks with local rank i, one per
// host, allgather their blocks over the network (ring or recursive
// doubling, chosen as any allgather over h ranks is), each group over its own links;
// (2) inside each host, a shared-memory allgather (allgather_shared_memory.hpp's
// steps) of the h blocks each rank now holds.
//
// Cost, S bytes in all: the network carries (h-1)/h S/L per rank, where a
// flat ring carries (hL-1)/(hL) S; plus the shared-memory steps.
// Chosen when the ranks span several hosts holding equal numbers (> 1) of
// ranks, from 16 KiB in all.
#pragma once

#include <chorus/collective/allgather_recursive_doubling.hpp>
#include <chorus/collective/allgather_ring.hpp>
#include <chorus/collective/allgather_shared_memory.hpp>
#include <chorus/collective/scratch.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/collective/subgroup_exchange.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace chorus::collective {

// The ranks `members` of `ex`, one on each host, allgather `data` (one
// block per member, in member order) over the network, chosen as any
// allgather over that many ranks is (CHORUS_TUNE reaches it).
template <class X, class A>
void allgather_between_hosts(X& ex, std::span<const int> members, std::span<A> data, std::size_t block) {
  subgroup_exchange<X> group(ex, members);
  const choice made = choose_between_hosts(ex.comm(), "allgather", group.size(), data.size_bytes());
  report_between_hosts(ex.comm(), "allgather", data.size_bytes(), group.size(), made);
  if (made.chosen == algorithm::ring) return allgather_ring(group, data, block);
  if (made.chosen == algorithm::recursive_doubling) return allgather_recursive_doubling(group, data, block);
  throw error(errc::invalid_argument, "allgather between hosts cannot run " + std::string(to_string(made.chosen)));
}

template <class Communicator, class A>
void allgather_hierarchical(exchange<Communicator>& ex, std::span<A> all, std::size_t block) {
  const host_layout& layout = ex.comm().layout();
  const auto hosts = static_cast<std::size_t>(layout.hosts);
  std::vector<std::vector<int>> held;
  for (int local = 0; local < static_cast<int>(layout.local.size()); ++local)
    held.push_back(layout.with_local_rank(local));
  const std::size_t part = std::max<std::size_t>(shared_memory_channel::default_slot_bytes / sizeof(A) / hosts, 1);
  // First, so that every rank reserves the setup phase at the same place.
  shared_memory_call call(ex, layout.local, steps_for(block, part), all.size_bytes());
  const std::span<A> packed = scratch<A>(hosts * block, 2);
  std::copy_n(all.data() + static_cast<std::size_t>(ex.rank()) * block, block,
              packed.data() + static_cast<std::size_t>(layout.host) * block);
  allgather_between_hosts(ex, layout.across, packed, block);
  for (std::size_t i = 0; i < hosts; ++i)
    std::copy_n(packed.data() + i * block, block, all.data() + static_cast<std::size_t>(layout.across[i]) * block);
  allgather_in_host(call, all, block, held);
}

}  // namespace chorus::collective
