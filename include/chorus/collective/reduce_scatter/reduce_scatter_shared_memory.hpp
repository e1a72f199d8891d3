// Shared-memory reduce_scatter: the ranks of one host meet in their segment
// (shared_memory_channel.hpp) instead of sending each other messages.
//
// In steps of one slot: every rank copies, for each other rank, its part of
// the blocks that rank owns into its slot; each rank then reduces its own
// blocks' parts, reading every rank's slot in place, in rank order, into
// its own buffer (its own contribution never moves). Every element is
// reduced once, by its owner. The hierarchical reduce_scatter uses the same
// steps with several blocks per owner (one per host).
//
// Cost per rank, S bytes of input: (n-1)/n S of memory traffic to copy in,
// S to read and S/n to write while reducing, 2 flag round trips per step.
// Chosen when every rank of the communicator is on one host, from 16 KiB of
// input.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/reduce_local.hpp>
#include <chorus/collective/machinery/shared_memory_channel.hpp>
#include <chorus/record/trace.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::collective {

// `work` holds blocks of `block` elements; `owned[d]` lists the blocks that
// the group's rank d reduces (the same count for every d). On return this
// rank's blocks hold their sums over the group, not finalised. Every rank
// of the group calls it with the same arguments but `work`.
template <class Call, class A, class Op>
void reduce_scatter_in_host(Call& call, std::span<A> work, std::size_t block,
                            const std::vector<std::vector<int>>& owned, const Op& op) {
  using stage = shared_memory_channel::stage;
  const int me = call.rank(), n = call.size();
  const std::size_t per_owner = owned[0].size();
  // Each step moves `part` elements of every block: the slot holds n x per_owner parts.
  const std::size_t part =
      std::max<std::size_t>(call.channel().template slot_count<A>() / (static_cast<std::size_t>(n) * per_owner), 1);
  const auto at = [&](int block_index, std::size_t offset) {
    return work.data() + static_cast<std::size_t>(block_index) * block + offset;
  };
  const auto slot_part = [&](int owner, std::uint64_t step, int destination, std::size_t j) {
    return call.channel().template slot<A>(owner, step).data() +
           (static_cast<std::size_t>(destination) * per_owner + j) * part;
  };
  std::vector<const A*> inputs(static_cast<std::size_t>(n));
  for (std::uint64_t k = 0; k < steps_for(block, part); ++k) {
    const std::uint64_t step = call.step(k);
    const std::size_t offset = std::min<std::size_t>(k * part, block), length = std::min(part, block - offset);
    {
      const record::phase phase("shared-memory copy in");
      if (step >= 2) call.wait_all(stage::consumed, step - 2);
      for (int destination = 0; destination < n; ++destination)
        for (std::size_t j = 0; destination != me && j < per_owner; ++j)
          std::copy_n(at(owned[static_cast<std::size_t>(destination)][j], offset), length,
                      slot_part(me, step, destination, j));
      call.publish(stage::posted, step);
    }
    const record::phase phase("shared-memory reduce");
    for (int owner = 0; owner < n; ++owner)
      if (owner != me) call.wait(owner, stage::posted, step);
    for (std::size_t j = 0; j < per_owner; ++j) {
      A* const target = at(owned[static_cast<std::size_t>(me)][j], offset);
      for (int owner = 0; owner < n; ++owner)
        inputs[static_cast<std::size_t>(owner)] = owner == me ? target : slot_part(owner, step, me, j);
      reduce_many(std::span<A>(target, length), std::span<const A* const>(inputs), op);
    }
    call.publish(stage::consumed, step);
  }
}

// Each rank's block r of `work` (n blocks) reduced over the host's ranks.
template <class Communicator, class A, class Op>
void reduce_scatter_in_shared_memory(exchange<Communicator>& ex, std::span<A> work, std::size_t block, const Op& op) {
  std::vector<std::vector<int>> owned;
  for (int rank = 0; rank < ex.size(); ++rank) owned.push_back({rank});
  const std::size_t part = std::max<std::size_t>(
      shared_memory_channel::default_slot_bytes / sizeof(A) / static_cast<std::size_t>(ex.size()), 1);
  shared_memory_call call(ex, every_rank(ex.size()), steps_for(block, part), work.size_bytes());
  reduce_scatter_in_host(call, work, block, owned, op);
}

namespace algorithms {
struct reduce_scatter_shared_memory : shared_memory_form {
  static constexpr std::string_view cost =
      "(n-1)/n S + S of memory traffic per rank + S/n gamma, 2 flag round trips per step";
  static double seconds(const workload& w, const machine& m) {
    const double S = double(w.bytes);
    return 2 * cost::memory_steps(w.bytes) * m.flag + (1 + cost::share(w.ranks)) * S * m.memory_beta +
           S / w.ranks * m.gamma;
  }
  template <class Communicator, class A, class Op, class Compute>
  static void run(exchange<Communicator>& ex, std::span<A> work, std::size_t block, const Op& op, const Compute&)
    requires std::same_as<Compute, host_compute> && knows_its_hosts<Communicator>
  {
    collective::reduce_scatter_in_shared_memory(ex, work, block, op);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
