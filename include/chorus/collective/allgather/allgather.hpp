// chorus::allgather: every rank contributes `mine` (the same count on every
// rank) and receives all contributions in rank order.
//
//   chorus::allgather(comm, mine, all);      // all.size() >= size * mine.size()
//   chorus::allgather(comm, all);            // in place: own block at rank * count
//   chorus::allgather(comm, all.subspan(rank * count, count), all);  // the same, NCCL's spelling
//
// Algorithms: the list in collective/allgather/allgather_algorithms.hpp, whose
// defaults (a CHORUS_TUNE string, shown in docs/collectives.md) take shared
// memory on one host and hierarchical across hosts for host buffers, else
// recursive doubling (Bruck, any n) for small totals and the pipelined ring
// for large; force one with chorus::algo::ring / rd / shm / hierarchical,
// or tune with CHORUS_TUNE.
#pragma once

#include <chorus/collective/allgather/allgather_algorithms.hpp>
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

namespace chorus {

namespace collective {

// The block each rank contributes; throws for sizes that do not split.
template <class Communicator, element T>
std::size_t allgather_block(const Communicator& comm, std::span<T> all) {
  const auto n = static_cast<std::size_t>(comm.size());
  if (all.size() % n != 0)
    throw error(errc::invalid_argument,
                std::to_string(all.size()) + " elements do not split into " + std::to_string(n) + " equal blocks",
                {comm.transport().rank(), -1, "allgather"});
  return all.size() / n;
}

// Whether an out-of-place allgather of `mine` into `all` would take the
// direct path: then it copies `mine` into place on the device and gathers in place.
template <class Communicator, element T>
bool allgather_goes_direct(memory_router& router, Communicator& comm, std::span<const T> mine, std::span<T> all) {
  if (mine.empty()) return false;
  const network_memory network = network_of(comm);
  return router.direct_path({mine.data(), mine.size_bytes(), buffer_use::read}, dtype_of<T>, "", network).direct &&
         router.direct_path({all.data(), all.size_bytes(), buffer_use::read_write}, dtype_of<T>, "", network).direct;
}

}  // namespace collective

// In place: `all` holds size() blocks; this rank's block is already filled.
// One body for every memory kind (front_door.hpp): only bytes move and
// copy, so the direct path needs no device kernels.
template <class Communicator, element T>
algorithm allgather(Communicator& comm, std::span<T> all, algorithm forced = algorithm::automatic) {
  const record::recorded_call recorded(record::recorder_of(comm), record::collective("allgather", all));
  const std::size_t block = collective::allgather_block(comm, all);
  memory_router* const router = routed(all);
  const choice made =
      choose(comm, entry_of<collective::allgather_algorithms>(),
             {.ranks = comm.size(), .bytes = all.size_bytes(), .host_memory = router == nullptr}, forced);
  if (collective::run_where(comm, router, "allgather", {{all.data(), all.size_bytes(), buffer_use::read_write}},
                            dtype_of<T>, "", !made.moves_host_memory, [&](auto& x, const auto& compute) {
                              collective::check_if_enabled(comm,
                                                           {"allgather", block, dtype_of<T>, "", -1, call_memory(all)});
                              report(comm, "allgather", all.size_bytes(), dtype_of<T>, made);
                              collective::allgather_by(x, all, block, made.chosen, compute);
                            }))
    return made.chosen;
  return through_host(
      *router, comm, [&](std::span<T> host) { return allgather(comm, host, forced); },
      staged(all, buffer_use::read_write));
}

// Out of place: `mine` into block rank() of `all`, then in place. `mine`
// may already be that block (NCCL's in-place form, which FSDP2 uses:
// mine == all + rank * count): then nothing is copied.
template <class Communicator, element T>
algorithm allgather(Communicator& comm, std::span<const T> mine, std::span<T> all,
                    algorithm forced = algorithm::automatic) {
  const std::size_t needed = mine.size() * static_cast<std::size_t>(comm.size());
  const std::size_t own = mine.size() * static_cast<std::size_t>(comm.rank());
  const auto checked = [&] {
    return collective::check_output(mine, all, needed, comm.transport().rank(), "allgather",
                                    collective::in_place_form::input_at(own));
  };
  memory_router* router = routed(mine, all);
  if (router != nullptr &&
      collective::allgather_goes_direct(*router, comm, mine, all.first(std::min(needed, all.size())))) {
    if (!checked()) copy_elements(comm, mine.data(), mine.size(), all.data() + own);
    return allgather(comm, all.first(needed), forced);  // in place, direct
  }
  if (router != nullptr)
    return through_host(
        *router, comm, [&](std::span<const T> in, std::span<T> out) { return allgather(comm, in, out, forced); },
        staged(mine, buffer_use::read), staged(all.first(std::min(needed, all.size())), buffer_use::write));
  if (!checked()) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(own));
  return allgather(comm, all.first(needed), forced);
}

}  // namespace chorus
