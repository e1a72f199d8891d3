// chorus::reduce: the root receives op over all ranks' data (binomial tree,
// cost ceil(log2 n) (alpha + S beta + S gamma)).
//
//   chorus::reduce(comm, input, output, root);      // output used at the root only
//   chorus::reduce(comm, data, root);               // in place at the root; others keep theirs
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/scratch.hpp>
#include <chorus/collective/reduce_tree.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/core/memory_router.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace chorus {

template <class Communicator, element T, class Op = op::sum>
algorithm reduce(Communicator& comm, std::span<const T> input, std::span<T> output, int root, Op op = {}) {
  if (memory_router* router = routed(input, output)) {
    const std::size_t filled = comm.rank() == root ? std::min(input.size(), output.size()) : 0;
    return through_host(
        *router, comm, [&](std::span<const T> in, std::span<T> out) { return reduce(comm, in, out, root, op); },
        staged(input, buffer_use::read), staged(output.first(filled), buffer_use::write));
  }
  const int rank = comm.transport().rank();
  collective::check_root(root, comm.size(), rank, "reduce");
  if (comm.rank() == root) collective::check_output(input, output, input.size(), rank, "reduce");
  collective::check_if_enabled(comm, {"reduce", input.size(), dtype_of<T>, op::name_of<Op>(), root});
  const choice made = choose(comm, "reduce", {comm.size(), input.size_bytes()}, algorithm::automatic);
  report(comm, "reduce", input.size_bytes(), dtype_of<T>, made);
  collective::exchange ex(comm, "reduce");
  using A = accumulator_t<T>;
  const std::span<A> work = collective::widened_copy(input);
  collective::reduce_tree(ex, work, root, op);
  if (comm.rank() == root) {
    collective::finalize_all(work, op, static_cast<std::size_t>(comm.size()));
    collective::narrow_into(std::span<const A>(work), output);
  }
  return algorithm::tree;
}

template <class Communicator, element T, class Op = op::sum>
algorithm reduce(Communicator& comm, std::span<T> data, int root, Op op = {}) {
  return reduce(comm, std::span<const T>(data), data, root, op);
}

}  // namespace chorus
