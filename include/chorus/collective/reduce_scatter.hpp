// chorus::reduce_scatter: the input holds size() blocks of `count` elements;
// rank r receives block r reduced over all ranks.
//
//   chorus::reduce_scatter(comm, input, output);   // output.size() >= input.size() / size
//
// Algorithms (collective/selection.hpp): shared memory when every rank is on
// one host, hierarchical across hosts of equal rank counts (both from 16
// KiB of input, host buffers); else recursive halving (any n, by folding)
// up to 64 KiB of input, the pipelined ring above; force one with
// chorus::algo::recursive_halving / ring / shm / hierarchical, or tune with
// CHORUS_TUNE.
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/local_steps.hpp>
#include <chorus/collective/reduce_scatter_algorithms.hpp>
#include <chorus/collective/scratch.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>
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
  check_output(input, output, block, rank, "reduce_scatter", false);
  return block;
}

// Buffers that are not host memory: the direct path where the router takes
// them (a device work copy of the input, reduced where it lives by the
// registry's algorithm), else staged.
template <class Communicator, element T, class Op>
algorithm reduce_scatter_through(memory_router& router, Communicator& comm, std::span<const T> input,
                                 std::span<T> output, const Op& op, algorithm forced) {
  const auto n = static_cast<std::size_t>(comm.size());
  const choice made = choose(comm, entry_of<collective::reduce_scatter_algorithms>(),
                             {.ranks = comm.size(), .bytes = input.size_bytes(), .host_memory = false}, forced);
  if constexpr (std::is_same_v<accumulator_t<T>, T>) {
    const std::size_t block = reduce_scatter_block(comm, input, output);
    const routed_buffer in{input.data(), input.size_bytes(), buffer_use::read};
    const routed_buffer out{output.data(), block * sizeof(T), buffer_use::write};
    const bool direct =
        !made.moves_host_memory &&
        run_direct(
            router, comm, "reduce_scatter", {in, out}, dtype_of<T>, op::name_of<Op>(), [&](local_arithmetic& where) {
              check_if_enabled(
                  comm, {"reduce_scatter", block, dtype_of<T>, op::name_of<Op>(), -1, call_memory(input, output)});
              report(comm, "reduce_scatter", input.size_bytes(), dtype_of<T>, made);
              exchange ex(comm, "reduce_scatter");
              network_exchange on_network(ex, where);
              const routed_steps steps(where);
              const std::span<T> work = steps.template work<T>(input.size());
              steps.copy(input, work);
              steps.settle();
              reduce_scatter_by(on_network, work, block, op, made.chosen, steps);
              const std::span<T> mine = work.subspan(static_cast<std::size_t>(comm.rank()) * block, block);
              steps.finalize(mine, op, n);
              steps.copy(std::span<const T>(mine), output.first(block));
            });
    if (direct) return made.chosen;
  } else {
    report_path(comm, "reduce_scatter", input.size_bytes(),
                staged_because("reductions over " + std::string(element_traits<T>::name)));
  }
  return through_host(
      router, comm, [&](std::span<const T> in, std::span<T> out) { return reduce_scatter(comm, in, out, op, forced); },
      staged(input, buffer_use::read),
      staged(output.first(std::min(output.size(), input.size() / n)), buffer_use::write));
}

}  // namespace collective

template <class Communicator, element T, class Op = op::sum>
  requires(!std::same_as<Op, algorithm>)
algorithm reduce_scatter(Communicator& comm, std::span<const T> input, std::span<T> output, Op op = {},
                         algorithm forced = algorithm::automatic) {
  const auto n = static_cast<std::size_t>(comm.size());
  if (memory_router* router = routed(input, output))
    return collective::reduce_scatter_through(*router, comm, input, output, op, forced);
  const std::size_t block = collective::reduce_scatter_block(comm, input, output);
  collective::check_if_enabled(
      comm, {"reduce_scatter", block, dtype_of<T>, op::name_of<Op>(), -1, call_memory(input, output)});
  const choice made =
      choose(comm, entry_of<collective::reduce_scatter_algorithms>(), {comm.size(), input.size_bytes()}, forced);
  report(comm, "reduce_scatter", input.size_bytes(), dtype_of<T>, made);
  collective::exchange ex(comm, "reduce_scatter");
  using A = accumulator_t<T>;
  const std::span<A> work = collective::widened_copy(input);
  collective::reduce_scatter_by(ex, work, block, op, made.chosen);
  const std::span<A> mine = work.subspan(static_cast<std::size_t>(comm.rank()) * block, block);
  collective::finalize_all(mine, op, n);
  collective::narrow_into(std::span<const A>(mine), output);
  return made.chosen;
}

template <class Communicator, element T>
algorithm reduce_scatter(Communicator& comm, std::span<const T> input, std::span<T> output, algorithm forced) {
  return reduce_scatter(comm, input, output, op::sum{}, forced);
}

}  // namespace chorus
