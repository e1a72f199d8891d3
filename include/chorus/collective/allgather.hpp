// chorus::allgather: every rank contributes `mine` (the same count on every
// rank) and receives all contributions in rank order.
//
//   chorus::allgather(comm, mine, all);      // all.size() >= size * mine.size()
//   chorus::allgather(comm, all);            // in place: own block at rank * count
//
// Algorithms (collective/selection.hpp): shared memory when every rank is on
// one host, hierarchical across hosts of equal rank counts (both from 16
// KiB in all, host buffers); else recursive doubling (Bruck, any n) up to
// 64 KiB in total, the pipelined ring above; force one with
// chorus::algo::ring / rd / shm / hierarchical, or tune with CHORUS_TUNE.
#pragma once

#include <chorus/collective/allgather_algorithms.hpp>
#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/local_steps.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/core/element_type.hpp>
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

// A buffer that is not host memory: the direct path where the router takes
// it (allgather only moves and copies bytes: no device kernels needed), else staged.
template <class Communicator, element T>
algorithm allgather_through(memory_router& router, Communicator& comm, std::span<T> all, algorithm forced) {
  const choice made = choose(comm, entry_of<collective::allgather_algorithms>(),
                             {.ranks = comm.size(), .bytes = all.size_bytes(), .host_memory = false}, forced);
  const std::size_t block = allgather_block(comm, all);
  const routed_buffer view{all.data(), all.size_bytes(), buffer_use::read_write};
  if (!made.moves_host_memory &&
      run_direct(router, comm, "allgather", {view}, dtype_of<T>, "", [&](local_arithmetic& where) {
        check_if_enabled(comm, {"allgather", block, dtype_of<T>, "", -1, call_memory(all)});
        report(comm, "allgather", all.size_bytes(), dtype_of<T>, made);
        exchange ex(comm, "allgather");
        network_exchange on_network(ex, where);
        allgather_by(on_network, all, block, made.chosen, routed_steps(where));
      }))
    return made.chosen;
  return through_host(
      router, comm, [&](std::span<T> host) { return allgather(comm, host, forced); },
      staged(all, buffer_use::read_write));
}

// Whether an out-of-place allgather of `mine` into `all` would take the
// direct path: then it copies `mine` into place on the device and gathers in place.
template <class Communicator, element T>
bool allgather_goes_direct(memory_router& router, Communicator& comm, std::span<const T> mine, std::span<T> all) {
  if (mine.empty()) return false;
  const memory_kinds moved = comm.transport().memory_kinds();
  return router.direct_path({mine.data(), mine.size_bytes(), buffer_use::read}, dtype_of<T>, "", moved).direct &&
         router.direct_path({all.data(), all.size_bytes(), buffer_use::read_write}, dtype_of<T>, "", moved).direct;
}

}  // namespace collective

// In place: `all` holds size() blocks; this rank's block is already filled.
template <class Communicator, element T>
algorithm allgather(Communicator& comm, std::span<T> all, algorithm forced = algorithm::automatic) {
  if (memory_router* router = routed(all)) return collective::allgather_through(*router, comm, all, forced);
  const std::size_t block = collective::allgather_block(comm, all);
  collective::check_if_enabled(comm, {"allgather", block, dtype_of<T>, "", -1, call_memory(all)});
  const choice made =
      choose(comm, entry_of<collective::allgather_algorithms>(), {comm.size(), all.size_bytes()}, forced);
  report(comm, "allgather", all.size_bytes(), dtype_of<T>, made);
  collective::exchange ex(comm, "allgather");
  collective::allgather_by(ex, all, block, made.chosen);
  return made.chosen;
}

template <class Communicator, element T>
algorithm allgather(Communicator& comm, std::span<const T> mine, std::span<T> all,
                    algorithm forced = algorithm::automatic) {
  const std::size_t needed = mine.size() * static_cast<std::size_t>(comm.size());
  memory_router* router = routed(mine, all);
  if (router != nullptr &&
      collective::allgather_goes_direct(*router, comm, mine, all.first(std::min(needed, all.size())))) {
    collective::check_output(mine, all, needed, comm.transport().rank(), "allgather", false);
    copy_elements(comm, mine.data(), mine.size(), all.data() + mine.size() * static_cast<std::size_t>(comm.rank()));
    return allgather(comm, all.first(needed), forced);  // in place, direct
  }
  if (router != nullptr)
    return through_host(
        *router, comm, [&](std::span<const T> in, std::span<T> out) { return allgather(comm, in, out, forced); },
        staged(mine, buffer_use::read), staged(all.first(std::min(needed, all.size())), buffer_use::write));
  collective::check_output(mine, all, needed, comm.transport().rank(), "allgather", false);
  std::copy(mine.begin(), mine.end(),
            all.begin() + static_cast<std::ptrdiff_t>(mine.size() * static_cast<std::size_t>(comm.rank())));
  return allgather(comm, all.first(needed), forced);
}

}  // namespace chorus
