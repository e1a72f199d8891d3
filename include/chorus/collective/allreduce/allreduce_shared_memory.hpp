// Shared-memory allreduce: the ranks of one host meet in a segment they all
// map (shared_memory_channel.hpp) instead of sending each other messages.
//
// In steps of one slot (512 KiB): every rank copies its chunk into its slot
// (all but its own slice, which only it reads); each rank reduces its 1/n
// slice of the chunk, reading its own input where it is and the others'
// slots in place, in rank order, and puts the result in its slot; every
// rank then copies the others' reduced slices out. Each element is reduced
// once, by one rank, in rank order, so every rank ends with the same bits.
// Two slots per rank let a fast rank fill step g + 1 while others finish
// step g.
//
// Cost per rank, S bytes, m per byte of memory traffic: (n-1)/n S m to copy
// in, S m + 2 S/n m to reduce and share its slice, (n-1)/n S m to copy out,
// in place or out of place alike (the input is read where it is; an output
// larger than the cache is written with streaming stores, so that its
// lines are not read first: core/streaming_copy.hpp), and 3 flag round
// trips per step (about a microsecond each), where UCX's shared-memory ring
// copies 2 (n-1)/n S twice (into its FIFO and out) and reduces besides.
//
// Chosen when every rank of the communicator is on one host, from 16 KiB
// (below that recursive doubling's log2(n) small messages are as fast).
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/block_partition.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/reduce_local.hpp>
#include <chorus/collective/machinery/shared_memory_channel.hpp>
#include <chorus/core/streaming_copy.hpp>
#include <chorus/record/trace.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <numeric>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::collective {

// The pieces of one allreduce step, shared with the hierarchical allreduce.
// A rank's own slice of a chunk never goes through its slot as input: it
// reduces that slice where it is, in the caller's buffer, and only the
// result goes to the slot for the others.
namespace shared_memory_steps {

using stage = shared_memory_channel::stage;

template <class Call>
block_partition slices_of(const Call& call, std::size_t count) {
  return {count, static_cast<std::size_t>(call.size())};
}
template <class Call, class A>
std::span<A> own_slice(const Call& call, std::span<A> chunk) {
  const block_partition slices = slices_of(call, chunk.size());
  const auto me = static_cast<std::size_t>(call.rank());
  return chunk.subspan(slices.offset(me), slices.size(me));
}

// Waits until the slot of `step` is free (everyone consumed step - 2),
// copies the chunk but this rank's own slice into its slot and says so.
template <class Call, class A>
void post(Call& call, std::uint64_t step, std::span<const A> chunk) {
  const record::phase phase("shared-memory copy in");
  if (step >= 2) call.wait_all(stage::consumed, step - 2);
  const block_partition slices = slices_of(call, chunk.size());
  const auto me = static_cast<std::size_t>(call.rank());
  const std::span<A> slot = call.channel().template slot<A>(call.rank(), step);
  std::copy_n(chunk.begin(), slices.offset(me), slot.begin());
  std::copy(chunk.begin() + static_cast<std::ptrdiff_t>(slices.offset(me + 1)), chunk.end(),
            slot.begin() + static_cast<std::ptrdiff_t>(slices.offset(me + 1)));
  call.publish(stage::posted, step);
}

// Waits until every other rank has posted `step`; returns each rank's
// contribution at `offset` in rank order: this rank's own at `own` (where
// the caller's input is), the others' in their slots.
template <class Call, class A>
std::vector<const A*> posted_contributions(Call& call, std::uint64_t step, const A* own, std::size_t offset) {
  std::vector<const A*> inputs(static_cast<std::size_t>(call.size()));
  for (int owner = 0; owner < call.size(); ++owner) {
    if (owner != call.rank()) call.wait(owner, stage::posted, step);
    inputs[static_cast<std::size_t>(owner)] =
        owner == call.rank() ? own : call.channel().template slot<A>(owner, step).data() + offset;
  }
  return inputs;
}

// Once every rank has posted `step`: reduces this rank's slice of the
// chunk over every rank's contribution, in rank order, reading its own
// from `given` (the chunk this rank posted) and the others' in their
// slots, into its slice of `chunk` (`given` itself in place), and returns
// that slice (not finalised, not yet shared).
template <class Call, class A, class Op>
std::span<A> reduce_slice(Call& call, std::uint64_t step, std::span<const A> given, std::span<A> chunk, const Op& op) {
  const record::phase phase("shared-memory reduce");
  const std::size_t offset = slices_of(call, chunk.size()).offset(static_cast<std::size_t>(call.rank()));
  const std::span<A> mine = own_slice(call, chunk);
  const std::vector<const A*> inputs = posted_contributions(call, step, own_slice(call, given).data(), offset);
  reduce_many(mine, std::span<const A* const>(inputs), op);
  return mine;
}

// Puts this rank's final slice of `chunk` in its slot for the others; a
// step that did not post first waits for its slot to be free.
template <class Call, class A>
void share_slice(Call& call, std::uint64_t step, std::span<const A> chunk, bool posted = true) {
  const record::phase phase("shared-memory share");
  if (!posted && step >= 2) call.wait_all(stage::consumed, step - 2);
  const std::size_t offset = slices_of(call, chunk.size()).offset(static_cast<std::size_t>(call.rank()));
  const std::span<const A> mine = own_slice(call, chunk);
  std::copy(mine.begin(), mine.end(),
            call.channel().template slot<A>(call.rank(), step).begin() + static_cast<std::ptrdiff_t>(offset));
  call.publish(stage::reduced, step);
}

// Reduce and share for an output streamed past the cache: this rank's
// slice of the chunk is reduced over every rank's contribution, in rank
// order, into its slot (no rank reads that part of the slot before
// `reduced`), a block at a time, each block finalised there and streamed
// to its place in `chunk` while it is in L1; then it is shared. (For an
// output that stays cached, reduce_slice and share_slice cost less: the
// kernel's stores into the slot would pull its lines from the other
// ranks' caches one by one, where share_slice's bulk copy does not.)
template <class Call, class A, class Op>
void reduce_and_share_streaming(Call& call, std::uint64_t step, std::span<const A> given, std::span<A> chunk,
                                const Op& op) {
  const record::phase phase("shared-memory reduce");
  constexpr std::size_t block = std::max<std::size_t>(2048 / sizeof(A), 1);  // L1-sized
  const std::size_t offset = slices_of(call, chunk.size()).offset(static_cast<std::size_t>(call.rank()));
  const std::span<A> mine = own_slice(call, chunk);
  const std::span<A> result = call.channel().template slot<A>(call.rank(), step).subspan(offset, mine.size());
  std::vector<const A*> inputs = posted_contributions(call, step, own_slice(call, given).data(), offset);
  for (std::size_t done = 0; done < mine.size(); done += block) {
    const std::size_t n = std::min(block, mine.size() - done);
    reduce_many(result.subspan(done, n), std::span<const A* const>(inputs), op);
    for (const A*& input : inputs) input += n;
    finalize_all(result.subspan(done, n), op, static_cast<std::size_t>(call.size()));
    streaming_copy(std::span<const A>(result.subspan(done, n)), mine.subspan(done, n));
  }
  call.publish(stage::reduced, step);
}

// Once the others have shared their slices of `step`: copies them into
// `chunk` (streamed, where `streaming`) and says this rank is done with the
// step.
template <class Call, class A>
void gather_slices(Call& call, std::uint64_t step, std::span<A> chunk, bool streaming = false) {
  const record::phase phase("shared-memory copy out");
  const block_partition slices = slices_of(call, chunk.size());
  for (int owner = 0; owner < call.size(); ++owner) {
    if (owner == call.rank()) continue;
    call.wait(owner, stage::reduced, step);
    const auto block = static_cast<std::size_t>(owner);
    const std::span<const A> reduced =
        call.channel().template slot<A>(owner, step).subspan(slices.offset(block), slices.size(block));
    copy_out(reduced, chunk.subspan(slices.offset(block), slices.size(block)), streaming);
  }
  call.publish(stage::consumed, step);
}

}  // namespace shared_memory_steps

// `input` to `data`, which may be the same span (in place): the input is
// read where it is, the result written where it goes, no pass besides. An
// output apart from the input that outgrows the cache is streamed (in
// place, its lines were just read, so a plain store costs no extra read).
template <class Communicator, class A, class Op>
void allreduce_in_shared_memory(exchange<Communicator>& ex, std::span<const A> input, std::span<A> data, const Op& op) {
  const std::size_t per_step = shared_memory_channel::default_slot_bytes / sizeof(A);
  const std::uint64_t steps = steps_for(data.size(), per_step);
  const std::vector<int> group = every_rank(ex.size());
  const bool streaming =
      input.data() != data.data() && streaming_pays(data.size_bytes() * 2 * static_cast<std::size_t>(ex.size()));
  shared_memory_call call(ex, group, steps, data.size_bytes());
  for (std::uint64_t k = 0; k < steps; ++k) {
    const std::span<const A> given = chunk_of(input, k, per_step);
    const std::span<A> chunk = chunk_of(data, k, per_step);
    const std::uint64_t step = call.step(k);
    shared_memory_steps::post(call, step, given);
    if (streaming) {
      shared_memory_steps::reduce_and_share_streaming(call, step, given, chunk, op);
    } else {
      finalize_all(shared_memory_steps::reduce_slice(call, step, given, chunk, op), op,
                   static_cast<std::size_t>(ex.size()));
      shared_memory_steps::share_slice(call, step, std::span<const A>(chunk));
    }
    shared_memory_steps::gather_slices(call, step, chunk, streaming);
  }
  if (streaming) streaming_fence();
}

namespace algorithms {
struct allreduce_shared_memory : shared_memory_form {
  static constexpr std::string_view cost =
      "3 flag round trips per 512 KiB step + 3 S of memory traffic per rank + S/n gamma";
  static double seconds(const workload& w, const machine& m) {
    const double S = double(w.bytes);
    return 3 * cost::memory_steps(w.bytes) * m.flag + 3 * S * m.memory_beta + S / w.ranks * m.gamma;
  }
  template <class Communicator, class A, class Op, class Compute>
  static void run(exchange<Communicator>& ex, std::span<const A> input, std::span<A> data, const Op& op, staging_hooks*,
                  const Compute&)
    requires std::same_as<Compute, host_compute> && knows_its_hosts<Communicator>
  {
    collective::allreduce_in_shared_memory(ex, input, data, op);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
