// chorus::reduce: the root receives op over all ranks' data (binomial tree,
// cost ceil(log2 n) (alpha + S beta + S gamma)).
//
//   chorus::reduce(comm, input, output, root);      // output used at the root only
//   chorus::reduce(comm, data, root);               // in place at the root; others keep theirs
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/local_steps.hpp>
#include <chorus/collective/reduce_tree.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace chorus {

namespace collective {

// Reduce's list: the binomial tree, the one algorithm it has.
struct reduce_algorithms : algorithm_list<algorithms::reduce_tree> {
  static constexpr std::string_view collective = "reduce";
  static constexpr std::string_view defaults = "reduce:0-:tree";
};

// The argument checks, the agreement check and the report, the same on
// every path.
template <class Communicator, element T, class Op>
void begin_reduce(Communicator& comm, std::span<const T> input, std::span<T> output, int root) {
  const int rank = comm.transport().rank();
  check_root(root, comm.size(), rank, "reduce");
  if (comm.rank() == root) check_output(input, output, input.size(), rank, "reduce");
  check_if_enabled(comm, {"reduce", input.size(), dtype_of<T>, op::name_of<Op>(), root, call_memory(input, output)});
  const choice made =
      choose(comm, entry_of<reduce_algorithms>(), {comm.size(), input.size_bytes()}, algorithm::automatic);
  report(comm, "reduce", input.size_bytes(), dtype_of<T>, made);
}

// Buffers that are not host memory: the direct path where the router takes
// them (element types that are their own accumulator, built-in ops: the
// tree reduces where the memory lives), else staged (the input read, the
// root's output written).
template <class Communicator, element T, class Op>
algorithm reduce_through(memory_router& router, Communicator& comm, std::span<const T> input, std::span<T> output,
                         int root, Op op) {
  const bool at_root = comm.rank() == root;
  const std::size_t filled = at_root ? std::min(input.size(), output.size()) : 0;
  const auto staged_call = [&] {
    return through_host(
        router, comm, [&](std::span<const T> in, std::span<T> out) { return reduce(comm, in, out, root, op); },
        staged(input, buffer_use::read), staged(output.first(filled), buffer_use::write));
  };
  if constexpr (!std::is_same_v<accumulator_t<T>, T>) {
    report_path(comm, "reduce", input.size_bytes(),
                staged_because("reductions over " + std::string(element_traits<T>::name)));
    return staged_call();
  } else {
    const routed_buffer in{input.data(), input.size_bytes(), buffer_use::read};
    const routed_buffer out{output.data(), filled * sizeof(T), buffer_use::write};
    if (run_direct(router, comm, "reduce", {in, out}, dtype_of<T>, op::name_of<Op>(), [&](local_arithmetic& where) {
          begin_reduce<Communicator, T, Op>(comm, input, output, root);
          exchange ex(comm, "reduce");
          network_exchange on_network(ex, where);
          const routed_steps steps(where);
          const std::span<T> work = steps.template work<T>(input.size());
          steps.copy(input, work);
          reduce_tree(on_network, work, root, op, steps);
          if (!at_root) return;
          steps.finalize(work, op, static_cast<std::size_t>(comm.size()));
          steps.copy(std::span<const T>(work), output.first(work.size()));
        }))
      return algorithm::tree;
    return staged_call();
  }
}

}  // namespace collective

template <class Communicator, element T, class Op = op::sum>
algorithm reduce(Communicator& comm, std::span<const T> input, std::span<T> output, int root, Op op = {}) {
  if (memory_router* router = routed(input, output))
    return collective::reduce_through(*router, comm, input, output, root, op);
  collective::begin_reduce<Communicator, T, Op>(comm, input, output, root);
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
