// chorus::reduce_scatter: the input holds size() blocks of `count` elements;
// rank r receives block r reduced over all ranks.
//
//   chorus::reduce_scatter(comm, input, output);   // output.size() >= input.size() / size
//   chorus::reduce_scatter(comm, input, input.subspan(rank * count, count));  // in place (NCCL's form)
//
// Algorithms: the list in collective/reduce_scatter/reduce_scatter_algorithms.hpp, whose
// defaults (a CHORUS_TUNE string, shown in docs/collectives.md) take shared
// memory on one host and hierarchical across hosts for host buffers, else
// recursive halving (any n, by folding) for small inputs and the pipelined
// ring for large; force one with chorus::algo::recursive_halving / ring /
// shm / hierarchical, or tune with CHORUS_TUNE.
#pragma once

#include <chorus/collective/machinery/arguments.hpp>
#include <chorus/collective/machinery/check.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/premultiply.hpp>
#include <chorus/collective/machinery/scratch.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/collective/reduce_scatter/reduce_scatter_algorithms.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace chorus {

namespace collective {

// The block each rank receives; throws for sizes that do not split.
template <class Communicator, element T>
std::size_t reduce_scatter_block(const Communicator& comm, std::span<const T> input, std::span<T> output) {
  const auto n = static_cast<std::size_t>(comm.size());
  const int rank = comm.transport().rank();
  if (input.size() % n != 0)
    throw error(errc::invalid_argument,
                std::to_string(input.size()) + " elements do not split into " + std::to_string(n) + " equal blocks",
                {rank, -1, "reduce_scatter"});
  const std::size_t block = input.size() / n;
  check_output(input, output, block, rank, "reduce_scatter",
               in_place_form::output_at(block * static_cast<std::size_t>(comm.rank())));
  return block;
}

}  // namespace collective

// One body for every memory kind (front_door.hpp): a work copy of the input
// in the accumulator type (float for half and bfloat16), reduced by the
// chosen algorithm where it lives, this rank's block finalized and copied
// out, rounded once.
template <class Communicator, element T, class Op = op::sum>
  requires(!std::same_as<Op, algorithm>)
algorithm reduce_scatter(Communicator& comm, std::span<const T> input, std::span<T> output, Op op = {},
                         algorithm forced = algorithm::automatic) {
  const record::recorded_call recorded(record::recorder_of(comm),
                                       record::collective("reduce_scatter", input, op::name_of<Op>()));
  if constexpr (op::premultiplies<Op>)  // premultiply.hpp; on device memory, staged below
    if (routed(input, output) == nullptr) {
      collective::reduce_scatter_block(comm, input, output);  // the in-place form is checked against the caller's input
      return reduce_scatter(comm, collective::premultiplied(input, op), output, op::sum{}, forced);
    }
  const auto n = static_cast<std::size_t>(comm.size());
  const std::size_t block = collective::reduce_scatter_block(comm, input, output);
  memory_router* const router = routed(input, output);
  const choice made =
      choose(comm, entry_of<collective::reduce_scatter_algorithms>(),
             {.ranks = comm.size(), .bytes = input.size_bytes(), .host_memory = router == nullptr}, forced);
  const auto body = [&](auto& x, const auto& compute) {
    collective::check_if_enabled(
        comm, {"reduce_scatter", block, dtype_of<T>, op::name_of<Op>(), -1, call_memory(input, output)});
    report(comm, "reduce_scatter", input.size_bytes(), dtype_of<T>, made);
    using A = accumulator_t<T>;
    const std::span<A> work = compute.template work<A>(input.size());
    compute.copy(input, work);
    compute.settle();
    collective::reduce_scatter_by(x, work, block, op, made.chosen, compute);
    const std::span<A> mine = work.subspan(static_cast<std::size_t>(comm.rank()) * block, block);
    compute.finalize(mine, op, n);
    compute.copy(std::span<const A>(mine), output.first(block));
  };
  if (collective::run_where < collective::reduces_in_itself<T> &&
      !op::premultiplies < Op >> (comm, router, "reduce_scatter",
                                  {{input.data(), input.size_bytes(), buffer_use::read},
                                   {output.data(), block * sizeof(T), buffer_use::write}},
                                  dtype_of<T>, op::name_of<Op>(), !made.moves_host_memory, body))
    return made.chosen;
  return through_host(
      *router, comm, [&](std::span<const T> in, std::span<T> out) { return reduce_scatter(comm, in, out, op, forced); },
      staged(input, buffer_use::read), staged(output.first(block), buffer_use::write));
}

template <class Communicator, element T>
algorithm reduce_scatter(Communicator& comm, std::span<const T> input, std::span<T> output, algorithm forced) {
  return reduce_scatter(comm, input, output, op::sum{}, forced);
}

}  // namespace chorus
