// Shared-memory allreduce for small messages: one slot, flags only.
//
// Every rank copies its whole input into its slot and says so; once every
// rank has, each one reads all n contributions in rank order and reduces
// the whole buffer into its own output, then says it has consumed the
// step. Every rank sums the same values in the same order, so all end with
// the same bits. A call waits on one flag per peer, where the chunked form
// (allreduce_shared_memory.hpp) waits on three per step; the wait for the
// slot to be free again comes two calls later, when the flags are long set.
//
// Cost per rank, S bytes, m per byte of memory traffic: S m to copy in,
// n S m to read (from the caches, at these sizes), (n-1) S gamma to reduce,
// one flag round trip; the chunked form reduces only S/n but pays three
// round trips and a copy out.
//
// Runs where the call fits one slot, widened accumulators included (at
// most half a slot: 256 KiB); chosen from the smallest sizes up to where
// the chunked form's share of the work wins (bench/sweep: 16 KiB here).
#pragma once

#include <chorus/collective/allreduce/allreduce_shared_memory.hpp>
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

// `input` to `data`, which may be the same span (in place).
template <class Communicator, class A, class Op>
void allreduce_in_one_slot(exchange<Communicator>& ex, std::span<const A> input, std::span<A> data, const Op& op) {
  using stage = shared_memory_channel::stage;
  if (data.size_bytes() > shared_memory_channel::default_slot_bytes)  // forced past its size: the chunked form
    return allreduce_in_shared_memory(ex, input, data, op);
  const int n = ex.size();
  shared_memory_call call(ex, every_rank(n), 1, data.size_bytes());
  const std::uint64_t step = call.step(0);
  {
    const record::phase phase("shared-memory copy in");
    std::copy(input.begin(), input.end(), call.channel().template slot<A>(call.rank(), step).begin());
    call.publish(stage::posted, step);
  }
  const record::phase phase("shared-memory reduce");
  const std::vector<const A*> contributions = shared_memory_steps::posted_contributions(call, step, input.data(), 0);
  reduce_many(data, std::span<const A* const>(contributions), op);
  call.publish(stage::consumed, step);
  finalize_all(data, op, static_cast<std::size_t>(n));
}

namespace algorithms {
struct allreduce_shared_memory_small : shared_memory_form {
  static constexpr algorithm id = algorithm::shared_memory_small;
  static constexpr std::array<std::string_view, 1> aliases{"shm_small"};
  // Half a slot: a half or bfloat16 call reduces float accumulators, twice its bytes.
  static constexpr std::size_t most_bytes = shared_memory_channel::default_slot_bytes / 2;
  static constexpr std::string_view needs = "every rank on one host and at most 256 KiB";
  static bool feasible(const workload& w) { return shared_memory_form::feasible(w) && w.bytes <= most_bytes; }
  static bool suits(const workload& w) { return feasible(w) && w.ranks >= 2; }
  static constexpr std::string_view cost = "1 flag round trip + (n+1) S of memory traffic per rank + (n-1) S gamma";
  static double seconds(const workload& w, const machine& m) {
    const double S = double(w.bytes);
    return m.flag + (w.ranks + 1) * S * m.memory_beta + (w.ranks - 1) * S * m.gamma;
  }
  template <class Communicator, class A, class Op, class Compute>
  static void run(exchange<Communicator>& ex, std::span<const A> input, std::span<A> data, const Op& op, staging_hooks*,
                  const Compute&)
    requires std::same_as<Compute, host_compute> && knows_its_hosts<Communicator>
  {
    collective::allreduce_in_one_slot(ex, input, data, op);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
