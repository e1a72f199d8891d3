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

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/scratch.hpp>
#include <chorus/collective/reduce_scatter/reduce_scatter_shared_memory.hpp>
#include <chorus/record/trace.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::collective {

// The ranks `members` of `ex`, one on each host, reduce_scatter `data` (one
// block per member, in member order) over the network, chosen as any
// reduce_scatter over that many ranks is (CHORUS_TUNE reaches it).
template <class X, class A, class Op>
void reduce_scatter_between_hosts(X& ex, std::span<const int> members, std::span<A> data, std::size_t block,
                                  const Op& op);  // over reduce_scatter's list: reduce_scatter_algorithms.hpp

template <class Communicator, class A, class Op>
void reduce_scatter_by_hosts(exchange<Communicator>& ex, std::span<A> work, std::size_t block, const Op& op) {
  const host_layout& layout = ex.comm().layout();
  const auto hosts = static_cast<std::size_t>(layout.hosts);
  std::vector<std::vector<int>> owned;
  for (int local = 0; local < static_cast<int>(layout.local.size()); ++local)
    owned.push_back(layout.with_local_rank(local));
  const std::size_t part =
      std::max<std::size_t>(shared_memory_channel::default_slot_bytes / sizeof(A) / (layout.local.size() * hosts), 1);
  shared_memory_call call(ex, layout.local, steps_for(block, part), work.size_bytes());
  {
    const record::phase phase("hierarchical: reduce in host");
    reduce_scatter_in_host(call, work, block, owned, op);
  }
  const std::span<A> packed = scratch<A>(hosts * block, 2);
  for (std::size_t i = 0; i < hosts; ++i)
    std::copy_n(work.data() + static_cast<std::size_t>(layout.across[i]) * block, block, packed.data() + i * block);
  {
    const record::phase phase("hierarchical: between hosts");
    reduce_scatter_between_hosts(ex, layout.across, packed, block, op);
  }
  std::copy_n(packed.data() + static_cast<std::size_t>(layout.host) * block, block,
              work.data() + static_cast<std::size_t>(ex.rank()) * block);
}

namespace algorithms {
struct reduce_scatter_hierarchical : hierarchical_form {
  static constexpr std::string_view cost =
      "shared memory, then reduce_scatter of S/L among the h hosts' L-th ranks, (h-1)/h S/L beta";
  static double seconds(const workload& w, const machine& m) {
    const int hosts = std::max(w.hosts, 1), local = std::max(w.ranks_per_host, 1);
    const double S = double(w.bytes);
    return 2 * cost::memory_steps(w.bytes) * m.flag + 2 * S * m.memory_beta + (hosts - 1) * m.alpha +
           cost::share(hosts) * S / local * (m.beta + m.gamma);
  }
  template <class Communicator, class A, class Op, class Compute>
  static void run(exchange<Communicator>& ex, std::span<A> work, std::size_t block, const Op& op, const Compute&)
    requires std::same_as<Compute, host_compute> && knows_its_hosts<Communicator>
  {
    collective::reduce_scatter_by_hosts(ex, work, block, op);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
