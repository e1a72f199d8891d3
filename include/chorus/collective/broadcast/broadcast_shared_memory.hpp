// Shared-memory broadcast: the root copies its data into its slot one step
// at a time and every other rank of the host copies it out.
//
// Cost, S bytes: S of memory traffic for the root, S for each other rank
// (all at once), 1 flag round trip per step. Chosen when every rank of the
// communicator is on one host, from 16 KiB.
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

namespace chorus::collective {

// The group's rank `root` sends `data` to the others of the group.
template <class Call, class A>
void broadcast_in_host(Call& call, std::span<A> data, int root) {
  using stage = shared_memory_channel::stage;
  const std::size_t per_step = call.channel().template slot_count<A>();
  for (std::uint64_t k = 0; k < steps_for(data.size(), per_step); ++k) {
    const std::uint64_t step = call.step(k);
    const std::span<A> chunk = chunk_of(data, k, per_step);
    const std::span<A> slot = call.channel().template slot<A>(root, step);
    if (call.rank() == root) {
      const record::phase phase("shared-memory copy in");
      if (step >= 2) call.wait_all(stage::consumed, step - 2);
      std::copy(chunk.begin(), chunk.end(), slot.begin());
      call.publish(stage::posted, step);
    } else {
      const record::phase phase("shared-memory copy out");
      call.wait(root, stage::posted, step);
      std::copy_n(slot.begin(), chunk.size(), chunk.begin());
    }
    call.publish(stage::consumed, step);
  }
}

template <class Communicator, class A>
void broadcast_in_shared_memory(exchange<Communicator>& ex, std::span<A> data, int root) {
  shared_memory_call call(ex, every_rank(ex.size()),
                          steps_for(data.size(), shared_memory_channel::default_slot_bytes / sizeof(A)),
                          data.size_bytes());
  broadcast_in_host(call, data, root);
}

namespace algorithms {
struct broadcast_shared_memory : shared_memory_form {
  static constexpr std::string_view cost = "S of memory traffic per rank, a flag round trip per 512 KiB";
  static double seconds(const workload& w, const machine& m) {
    return cost::memory_steps(w.bytes) * m.flag + double(w.bytes) * m.memory_beta;
  }
  template <class Communicator, class A>
  static void run(exchange<Communicator>& ex, std::span<A> data, int root)
    requires knows_its_hosts<Communicator>
  {
    collective::broadcast_in_shared_memory(ex, data, root);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
