// chorus::gather: the root receives every rank's block, in rank order.
// Algorithms: the list in collective/gather/gather_algorithms.hpp (linear:
// the root posts every receive at once).
//
//   chorus::gather(comm, mine, all, root);   // all (size() * mine.size()) used at the root
//
// At the root `mine` may be its own block of `all` (in place: all + root *
// count); it is then not copied.
#pragma once

#include <chorus/collective/gather/gather_algorithms.hpp>
#include <chorus/collective/machinery/arguments.hpp>
#include <chorus/collective/machinery/check.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/front_door.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace chorus {

namespace collective {

// The checks every rank makes before a gather.
template <class Communicator, element T>
void check_gather(const Communicator& comm, std::span<const T> mine, std::span<T> all, int root) {
  const int world = comm.transport().rank();
  check_root(root, comm.size(), world, "gather");
  if (comm.rank() == root)
    check_output(mine, all, mine.size() * static_cast<std::size_t>(comm.size()), world, "gather",
                 in_place_form::input_at(mine.size() * static_cast<std::size_t>(root)));
}

}  // namespace collective

// One body for every memory kind (front_door.hpp): only bytes move, so the
// direct path needs no device kernels; staged, this rank's block is read
// and the root's output written.
template <class Communicator, element T>
algorithm gather(Communicator& comm, std::span<const T> mine, std::span<T> all, int root) {
  const record::recorded_call recorded(record::recorder_of(comm), record::collective("gather", mine, {}, root));
  collective::check_gather(comm, mine, all, root);
  const std::size_t filled = comm.rank() == root ? mine.size() * static_cast<std::size_t>(comm.size()) : 0;
  memory_router* const router = routed(mine, all);
  const choice made = choose(comm, entry_of<collective::gather_algorithms>(),
                             {.ranks = comm.size(),
                              .bytes = mine.size_bytes() * static_cast<std::size_t>(comm.size()),
                              .host_memory = router == nullptr},
                             algorithm::automatic);
  if (collective::run_where(
          comm, router, "gather",
          {{mine.data(), mine.size_bytes(), buffer_use::read}, {all.data(), filled * sizeof(T), buffer_use::write}},
          dtype_of<T>, "", true, [&](auto& x, const auto& compute) {
            collective::check_if_enabled(comm, {"gather", mine.size(), dtype_of<T>, "", root, call_memory(mine, all)});
            report(comm, "gather", mine.size_bytes() * static_cast<std::size_t>(comm.size()), dtype_of<T>, made);
            collective::gather_by(x, comm, mine, all, root, made.chosen, compute);
          }))
    return made.chosen;
  return through_host(
      *router, comm,
      [&](std::span<const T> host_in, std::span<T> host_out) { return gather(comm, host_in, host_out, root); },
      staged(mine, buffer_use::read), staged(all.first(filled), buffer_use::write));
}

}  // namespace chorus
