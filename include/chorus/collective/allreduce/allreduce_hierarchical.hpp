// Hierarchical allreduce: shared memory inside each host, the network only
// between hosts.
//
// With h hosts of L ranks each: (1) inside each host, a shared-memory
// reduce-scatter (allreduce_shared_memory.hpp's steps): local rank i ends
// with slice i of every chunk reduced over its host; (2) the h ranks with
// local rank i, one per host, allreduce their slices over the network
// (chosen as any allreduce over h ranks is: CHORUS_TUNE reaches it), all
// L groups at once, each over its own links; (3) inside each host, a
// shared-memory allgather of the final slices. Every slice is reduced in
// one order (host's ranks in rank order, then the network algorithm, whose
// result is the same bits on every rank of the group), so every rank ends
// with the same bits.
//
// Cost, S bytes: the network carries 2 (h-1)/h S/L per rank, 2 (h-1)/h S
// per host in all, the least any allreduce can move between hosts, where a
// flat ring over all h L ranks carries 2 (hL-1)/(hL) S per rank, L times as
// much through each host's link; plus the shared-memory steps.
//
// Chosen when the ranks span several hosts holding equal numbers (> 1) of
// ranks, from 16 KiB.
#pragma once

#include <chorus/collective/allreduce/allreduce_shared_memory.hpp>
#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/scratch.hpp>
#include <chorus/record/trace.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>

namespace chorus::collective {

// An operator's combining without its finishing step (avg's division): the
// parts of a hierarchical reduction combine partial results, and the whole
// is finished once, over every rank's contribution.
template <class Op>
struct combining_only {
  const Op& op;
  template <class A>
  A operator()(const A& a, const A& b) const {
    return op(a, b);
  }
};

// Allreduce of `data` among the ranks of `ex` in `members`, one on each
// host, over the network: chosen as any allreduce over that many ranks is
// (choose_between_hosts: CHORUS_TUNE reaches it), never shared memory.
template <class X, class A, class Op>
void allreduce_between_hosts(X& ex, std::span<const int> members, std::span<A> data,
                             const Op& op);  // over allreduce's list: allreduce_algorithms.hpp

// `input` to `data`, which may be the same span (in place): step (1) reads
// the input where it is; the rest works in `data`.
template <class Communicator, class A, class Op>
void allreduce_by_hosts(exchange<Communicator>& ex, std::span<const A> input, std::span<A> data, const Op& op) {
  namespace steps = shared_memory_steps;
  const host_layout& layout = ex.comm().layout();
  const std::size_t per_step = shared_memory_channel::default_slot_bytes / sizeof(A);
  const std::uint64_t chunks = steps_for(data.size(), per_step);
  shared_memory_call call(ex, layout.local, 2 * chunks, data.size_bytes());
  // (1) each chunk's own slice reduced over the host, where it is.
  std::size_t slice_total = 0;
  for (std::uint64_t k = 0; k < chunks; ++k) {
    const record::phase phase("hierarchical: reduce in host");
    const std::span<const A> given = chunk_of(input, k, per_step);
    steps::post(call, call.step(k), given);
    slice_total +=
        steps::reduce_slice(call, call.step(k), given, chunk_of(data, k, per_step), combining_only<Op>{op}).size();
    call.publish(steps::stage::consumed, call.step(k));
  }
  // (2) the slices, packed, over the network among the hosts' ranks with this local rank.
  const std::span<A> packed = scratch<A>(slice_total, 2);
  const auto each_slice = [&](auto&& visit) {
    std::size_t at = 0;
    for (std::uint64_t k = 0; k < chunks; ++k) {
      const std::span<A> mine = steps::own_slice(call, chunk_of(data, k, per_step));
      visit(mine, packed.subspan(at, mine.size()));
      at += mine.size();
    }
  };
  each_slice(
      [](std::span<A> mine, std::span<A> packed_part) { std::copy(mine.begin(), mine.end(), packed_part.begin()); });
  {
    const record::phase phase("hierarchical: between hosts");
    allreduce_between_hosts(ex, layout.across, packed, combining_only<Op>{op});
  }
  finalize_all(packed, op, static_cast<std::size_t>(ex.size()));
  each_slice([](std::span<A> mine, std::span<A> packed_part) {
    std::copy(packed_part.begin(), packed_part.end(), mine.begin());
  });
  // (3) the final slices to every rank of the host.
  for (std::uint64_t k = 0; k < chunks; ++k) {
    const record::phase phase("hierarchical: share in host");
    const std::span<A> chunk = chunk_of(data, k, per_step);
    steps::share_slice(call, call.step(chunks + k), std::span<const A>(chunk), false);
    steps::gather_slices(call, call.step(chunks + k), chunk);
  }
}

namespace algorithms {
struct allreduce_hierarchical : hierarchical_form {
  static constexpr std::string_view cost =
      "shared memory in each host + allreduce of S/L among the h hosts' L-th ranks: 2 (h-1)/h S/L beta per rank";
  static double seconds(const workload& w, const machine& m) {
    const int hosts = std::max(w.hosts, 1), local = std::max(w.ranks_per_host, 1);
    const double S = double(w.bytes), slice = S / local;
    return 2 * cost::memory_steps(w.bytes) * m.flag + 3 * S * m.memory_beta + 2 * (hosts - 1) * m.alpha +
           2 * cost::share(hosts) * slice * m.beta + S / local * m.gamma;
  }
  template <class Communicator, class A, class Op, class Compute>
  static void run(exchange<Communicator>& ex, std::span<const A> input, std::span<A> data, const Op& op, staging_hooks*,
                  const Compute&)
    requires std::same_as<Compute, host_compute> && knows_its_hosts<Communicator>
  {
    collective::allreduce_by_hosts(ex, input, data, op);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
