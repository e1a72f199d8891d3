// Shared-memory allgather: the ranks of one host meet in their segment
// (shared_memory_channel.hpp) instead of sending each other messages.
//
// In steps of one slot: every rank copies its part of its own block into
// its slot; every rank then copies the others' parts out. The hierarchical
// allgather uses the same steps with several blocks per rank (the ones it
// gathered from the other hosts).
//
// Cost per rank, S bytes in all: S/n of memory traffic to copy in,
// (n-1)/n S to copy out, 2 flag round trips per step. Chosen when every
// rank of the communicator is on one host, from 16 KiB in all.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
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

// `all` holds blocks of `block` elements; `held[d]` lists the blocks that
// the group's rank d has (the same count for every d). On return every rank
// has all of them. Every rank of the group calls it with the same arguments
// but `all`.
template <class Call, class A>
void allgather_in_host(Call& call, std::span<A> all, std::size_t block, const std::vector<std::vector<int>>& held) {
  using stage = shared_memory_channel::stage;
  const int me = call.rank(), n = call.size();
  const std::size_t per_rank = held[0].size();
  const std::size_t part = std::max<std::size_t>(call.channel().template slot_count<A>() / per_rank, 1);
  const auto at = [&](int block_index, std::size_t offset) {
    return all.data() + static_cast<std::size_t>(block_index) * block + offset;
  };
  for (std::uint64_t k = 0; k < steps_for(block, part); ++k) {
    const std::uint64_t step = call.step(k);
    const std::size_t offset = std::min<std::size_t>(k * part, block), length = std::min(part, block - offset);
    {
      const record::phase phase("shared-memory copy in");
      if (step >= 2) call.wait_all(stage::consumed, step - 2);
      for (std::size_t j = 0; j < per_rank; ++j)
        std::copy_n(at(held[static_cast<std::size_t>(me)][j], offset), length,
                    call.channel().template slot<A>(me, step).data() + j * part);
      call.publish(stage::posted, step);
    }
    const record::phase phase("shared-memory copy out");
    for (int owner = 0; owner < n; ++owner) {
      if (owner == me) continue;
      call.wait(owner, stage::posted, step);
      for (std::size_t j = 0; j < per_rank; ++j)
        std::copy_n(call.channel().template slot<A>(owner, step).data() + j * part, length,
                    at(held[static_cast<std::size_t>(owner)][j], offset));
    }
    call.publish(stage::consumed, step);
  }
}

template <class Communicator, class A>
void allgather_in_shared_memory(exchange<Communicator>& ex, std::span<A> all, std::size_t block) {
  std::vector<std::vector<int>> held;
  for (int rank = 0; rank < ex.size(); ++rank) held.push_back({rank});
  shared_memory_call call(ex, every_rank(ex.size()),
                          steps_for(block, shared_memory_channel::default_slot_bytes / sizeof(A)), all.size_bytes());
  allgather_in_host(call, all, block, held);
}

namespace algorithms {
struct allgather_shared_memory : shared_memory_form {
  static constexpr std::string_view cost = "S/n + (n-1)/n S of memory traffic per rank, a flag round trip per step";
  static double seconds(const workload& w, const machine& m) {
    return cost::memory_steps(w.bytes) * m.flag + double(w.bytes) * m.memory_beta;
  }
  template <class Communicator, class A, class Compute>
  static void run(exchange<Communicator>& ex, std::span<A> all, std::size_t block, const Compute&)
    requires std::same_as<Compute, host_compute> && knows_its_hosts<Communicator>
  {
    collective::allgather_in_shared_memory(ex, all, block);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
