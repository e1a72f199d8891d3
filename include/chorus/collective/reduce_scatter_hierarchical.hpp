// Hierarchical reduce_scatter: shared memory inside each host, the network
// only between hosts.
//
// With h hosts of L ranks each: (1) inside each host, a shared-memory
// reduce_scatter (reduce_scatter_shared_memory.hpp's steps) in which local
// rank i reduces, over its host, the h blocks of the ranks with local rank
// i (one per host); (2) those h ranks, one per host, reduce_scatter the h
// partial blocks over the network (ring or recursive halving, chosen as
// any reduce_scatter over h ranks is), each group over its own links. Every block is reduced in
// one order, so the result does not depend on which rank asks.
//
// Cost, S bytes of input: the network carries (h-1)/h S/L per rank, where a
// flat ring carries (hL-1)/(hL) S; plus the shared-memory steps.
// Chosen when the ranks span several hosts holding equal numbers (> 1) of
// ranks, from 16 KiB of input.
#pragma once

#include <chorus/collective/reduce_scatter_halving.hpp>
#include <chorus/collective/reduce_scatter_ring.hpp>
#include <chorus/collective/reduce_scatter_shared_memory.hpp>
#include <chorus/collective/scratch.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/collective/subgroup_exchange.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace chorus::collective {

// The ranks `members` of `ex`, one on each host, reduce_scatter `data` (one
// block per member, in member order) over the network, chosen as any
// reduce_scatter over that many ranks is (CHORUS_TUNE reaches it).
template <class X, class A, class Op>
void reduce_scatter_between_hosts(X& ex, std::span<const int> members, std::span<A> data, std::size_t block,
                                  const Op& op) {
  subgroup_exchange<X> group(ex, members);
  const choice made = choose_between_hosts(ex.comm(), "reduce_scatter", group.size(), data.size_bytes());
  report_between_hosts(ex.comm(), "reduce_scatter", data.size_bytes(), group.size(), made);
  if (made.chosen == algorithm::ring) return reduce_scatter_ring(group, data, block, op);
  if (made.chosen == algorithm::recursive_halving) return reduce_scatter_halving(group, data, block, op);
  throw error(errc::invalid_argument, "reduce_scatter between hosts cannot run " + std::string(to_string(made.chosen)));
}

template <class Communicator, class A, class Op>
void reduce_scatter_hierarchical(exchange<Communicator>& ex, std::span<A> work, std::size_t block, const Op& op) {
  const host_layout& layout = ex.comm().layout();
  const auto hosts = static_cast<std::size_t>(layout.hosts);
  std::vector<std::vector<int>> owned;
  for (int local = 0; local < static_cast<int>(layout.local.size()); ++local)
    owned.push_back(layout.with_local_rank(local));
  const std::size_t part =
      std::max<std::size_t>(shared_memory_channel::default_slot_bytes / sizeof(A) / (layout.local.size() * hosts), 1);
  shared_memory_call call(ex, layout.local, steps_for(block, part), work.size_bytes());
  reduce_scatter_in_host(call, work, block, owned, op);
  const std::span<A> packed = scratch<A>(hosts * block, 2);
  for (std::size_t i = 0; i < hosts; ++i)
    std::copy_n(work.data() + static_cast<std::size_t>(layout.across[i]) * block, block, packed.data() + i * block);
  reduce_scatter_between_hosts(ex, layout.across, packed, block, op);
  std::copy_n(packed.data() + static_cast<std::size_t>(layout.host) * block, block,
              work.data() + static_cast<std::size_t>(ex.rank()) * block);
}

}  // namespace chorus::collective
