// chorus::scatter: rank r receives block r of the root's data.
// Algorithms: the list in collective/scatter/scatter_algorithms.hpp (linear:
// the root posts every send at once).
//
//   chorus::scatter(comm, all, mine, root);   // all (size() * mine.size()) read at the root
//
// At the root `mine` may be its own block of `all` (in place: all + root *
// count); it is then not copied.
#pragma once

#include <chorus/collective/machinery/arguments.hpp>
#include <chorus/collective/machinery/check.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/front_door.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/collective/scatter/scatter_algorithms.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace chorus {

namespace collective {

// The checks every rank makes before a scatter.
template <class Communicator, element T>
void check_scatter(const Communicator& comm, std::span<const T> all, std::span<T> mine, int root) {
  const int n = comm.size(), world = comm.transport().rank();
  check_root(root, n, world, "scatter");
  const std::size_t block = mine.size();
  if (comm.rank() != root) return;
  if (all.size() < block * static_cast<std::size_t>(n))
    throw error(errc::invalid_argument,
                "input holds " + std::to_string(all.size()) + " elements, needs " +
                    std::to_string(block * static_cast<std::size_t>(n)),
                {world, -1, "scatter"});
  check_output(all, mine, block, world, "scatter", in_place_form::output_at(block * static_cast<std::size_t>(root)));
}

}  // namespace collective

// One body for every memory kind (front_door.hpp): only bytes move, so the
// direct path needs no device kernels; staged, the root's blocks are read
// and this rank's block written.
template <class Communicator, element T>
algorithm scatter(Communicator& comm, std::span<const T> all, std::span<T> mine, int root) {
  const record::recorded_call recorded(record::recorder_of(comm), record::collective("scatter", mine, {}, root));
  collective::check_scatter(comm, all, mine, root);
  const std::size_t used = comm.rank() == root ? mine.size() * static_cast<std::size_t>(comm.size()) : 0;
  memory_router* const router = routed(all, mine);
  const choice made = choose(comm, entry_of<collective::scatter_algorithms>(),
                             {.ranks = comm.size(),
                              .bytes = mine.size_bytes() * static_cast<std::size_t>(comm.size()),
                              .host_memory = router == nullptr},
                             algorithm::automatic);
  if (collective::run_where(
          comm, router, "scatter",
          {{all.data(), used * sizeof(T), buffer_use::read}, {mine.data(), mine.size_bytes(), buffer_use::write}},
          dtype_of<T>, "", true, [&](auto& x, const auto& compute) {
            collective::check_if_enabled(comm, {"scatter", mine.size(), dtype_of<T>, "", root, call_memory(all, mine)});
            report(comm, "scatter", mine.size_bytes() * static_cast<std::size_t>(comm.size()), dtype_of<T>, made);
            collective::scatter_by(x, comm, all, mine, root, made.chosen, compute);
          }))
    return made.chosen;
  return through_host(
      *router, comm,
      [&](std::span<const T> host_in, std::span<T> host_out) { return scatter(comm, host_in, host_out, root); },
      staged(all.first(used), buffer_use::read), staged(mine, buffer_use::write));
}

}  // namespace chorus
