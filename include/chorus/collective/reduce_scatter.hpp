// chorus::reduce_scatter: the input holds size() blocks of `count` elements;
// rank r receives block r reduced over all ranks.
//
//   chorus::reduce_scatter(comm, input, output);   // output.size() >= input.size() / size
//
// Algorithms (collective/selection.hpp): recursive halving (any n, by
// folding) up to 64 KiB of input, the pipelined ring above; force one with
// chorus::algo::recursive_halving / ring, or tune with CHORUS_TUNE.
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/scratch.hpp>
#include <chorus/collective/reduce_scatter_halving.hpp>
#include <chorus/collective/reduce_scatter_ring.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/core/memory_router.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace chorus {

template <class Communicator, element T, class Op = op::sum>
  requires(!std::same_as<Op, algorithm>)
algorithm reduce_scatter(Communicator& comm, std::span<const T> input, std::span<T> output, Op op = {},
                         algorithm forced = algorithm::automatic) {
  const auto n = static_cast<std::size_t>(comm.size());
  if (memory_router* router = routed(input, output))
    return through_host(
        *router, comm,
        [&](std::span<const T> in, std::span<T> out) { return reduce_scatter(comm, in, out, op, forced); },
        staged(input, buffer_use::read), staged(output.first(std::min(output.size(), input.size() / n)), buffer_use::write));
  const int rank = comm.transport().rank();
  if (input.size() % n != 0)
    throw error(errc::invalid_argument,
                std::to_string(input.size()) + " elements do not split into " + std::to_string(n) + " equal blocks",
                {rank, -1, "reduce_scatter"});
  const std::size_t block = input.size() / n;
  collective::check_output(input, output, block, rank, "reduce_scatter", false);
  collective::check_if_enabled(comm, {"reduce_scatter", block, dtype_of<T>, op::name_of<Op>(), -1});
  const choice made = choose(comm, "reduce_scatter", {comm.size(), input.size_bytes()}, forced);
  report(comm, "reduce_scatter", input.size_bytes(), dtype_of<T>, made);
  collective::exchange ex(comm, "reduce_scatter");
  using A = accumulator_t<T>;
  const std::span<A> work = collective::widened_copy(input);
  if (made.chosen == algorithm::ring) collective::reduce_scatter_ring(ex, work, block, op);
  else collective::reduce_scatter_halving(ex, work, block, op);
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
