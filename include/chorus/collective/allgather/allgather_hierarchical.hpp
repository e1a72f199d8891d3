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

#include <chorus/collective/allgather/allgather_shared_memory.hpp>
#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/scratch.hpp>
#include <chorus/record/trace.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::collective {

// The ranks `members` of `ex`, one on each host, allgather `data` (one
// block per member, in member order) over the network, chosen as any
// allgather over that many ranks is (CHORUS_TUNE reaches it).
template <class X, class A>
void allgather_between_hosts(X& ex, std::span<const int> members, std::span<A> data,
                             std::size_t block);  // over allgather's list: allgather_algorithms.hpp

template <class Communicator, class A>
void allgather_by_hosts(exchange<Communicator>& ex, std::span<A> all, std::size_t block) {
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
  {
    const record::phase phase("hierarchical: between hosts");
    allgather_between_hosts(ex, layout.across, packed, block);
  }
  for (std::size_t i = 0; i < hosts; ++i)
    std::copy_n(packed.data() + i * block, block, all.data() + static_cast<std::size_t>(layout.across[i]) * block);
  const record::phase phase("hierarchical: share in host");
  allgather_in_host(call, all, block, held);
}

namespace algorithms {
struct allgather_hierarchical : hierarchical_form {
  static constexpr std::string_view cost =
      "allgather of S/L among the h hosts' L-th ranks, (h-1)/h S/L beta, then shared memory";
  static double seconds(const workload& w, const machine& m) {
    const int hosts = std::max(w.hosts, 1), local = std::max(w.ranks_per_host, 1);
    const double S = double(w.bytes);
    return (hosts - 1) * m.alpha + cost::share(hosts) * S / local * m.beta + cost::memory_steps(w.bytes) * m.flag +
           S * m.memory_beta;
  }
  template <class Communicator, class A, class Compute>
  static void run(exchange<Communicator>& ex, std::span<A> all, std::size_t block, const Compute&)
    requires std::same_as<Compute, host_compute> && knows_its_hosts<Communicator>
  {
    collective::allgather_by_hosts(ex, all, block);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
