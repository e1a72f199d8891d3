// chorus::reduce: the root receives op over all ranks' data.
//
// Algorithms: the list in collective/reduce/reduce_algorithms.hpp (the
// binomial tree, ceil(log2 n) (alpha + S beta + S gamma)).
//
//   chorus::reduce(comm, input, output, root);      // output used at the root only
//   chorus::reduce(comm, data, root);               // in place at the root; others keep theirs
#pragma once

#include <chorus/collective/machinery/arguments.hpp>
#include <chorus/collective/machinery/check.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/front_door.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/premultiply.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/collective/reduce/reduce_algorithms.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace chorus {

// One body for every memory kind (front_door.hpp): a work copy of the input
// in the accumulator type (float for half and bfloat16) reduced up the
// tree where it lives; the root finalizes it and copies it out, rounded
// once. Staged: the input read, the root's output written.
template <class Communicator, element T, class Op = op::sum>
algorithm reduce(Communicator& comm, std::span<const T> input, std::span<T> output, int root, Op op = {}) {
  const record::recorded_call recorded(record::recorder_of(comm),
                                       record::collective("reduce", input, op::name_of<Op>(), root));
  if constexpr (op::premultiplies<Op>)  // premultiply.hpp; on device memory, staged below
    if (routed(input, output) == nullptr)
      return reduce(comm, collective::premultiplied(input, op), output, root, op::sum{});
  const int rank = comm.transport().rank();
  collective::check_root(root, comm.size(), rank, "reduce");
  const bool at_root = comm.rank() == root;
  if (at_root) collective::check_output(input, output, input.size(), rank, "reduce");
  const std::size_t filled = at_root ? input.size() : 0;
  memory_router* const router = routed(input, output);
  const choice made = choose(comm, entry_of<collective::reduce_algorithms>(),
                             {.ranks = comm.size(), .bytes = input.size_bytes(), .host_memory = router == nullptr},
                             algorithm::automatic);
  const auto body = [&](auto& x, const auto& compute) {
    collective::check_if_enabled(
        comm, {"reduce", input.size(), dtype_of<T>, op::name_of<Op>(), root, call_memory(input, output)});
    report(comm, "reduce", input.size_bytes(), dtype_of<T>, made);
    using A = accumulator_t<T>;
    const std::span<A> work = compute.template work<A>(input.size());
    compute.copy(input, work);
    collective::reduce_by(x, work, root, op, made.chosen, compute);
    if (!at_root) return;
    compute.finalize(work, op, static_cast<std::size_t>(comm.size()));
    compute.copy(std::span<const A>(work), output.first(work.size()));
  };
  if (collective::run_where < collective::reduces_in_itself<T> &&
      !op::premultiplies < Op >> (comm, router, "reduce",
                                  {{input.data(), input.size_bytes(), buffer_use::read},
                                   {output.data(), filled * sizeof(T), buffer_use::write}},
                                  dtype_of<T>, op::name_of<Op>(), true, body))
    return made.chosen;
  return through_host(
      *router, comm, [&](std::span<const T> in, std::span<T> out) { return reduce(comm, in, out, root, op); },
      staged(input, buffer_use::read), staged(output.first(filled), buffer_use::write));
}

template <class Communicator, element T, class Op = op::sum>
algorithm reduce(Communicator& comm, std::span<T> data, int root, Op op = {}) {
  return reduce(comm, std::span<const T>(data), data, root, op);
}

}  // namespace chorus
