// chorus::allgather: every rank contributes `mine` (the same count on every
// rank) and receives all contributions in rank order.
//
//   chorus::allgather(comm, mine, all);      // all.size() >= size * mine.size()
//   chorus::allgather(comm, all);            // in place: own block at rank * count
//
// Algorithms (collective/selection.hpp): recursive doubling (Bruck, any n)
// for up to 64 KiB in total, the pipelined ring above; force one with
// chorus::algo::ring / chorus::algo::rd, or tune with CHORUS_TUNE.
#pragma once

#include <chorus/collective/allgather_recursive_doubling.hpp>
#include <chorus/collective/allgather_ring.hpp>
#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/memory_router.hpp>

#include <algorithm>
#include <span>

namespace chorus {

// In place: `all` holds size() blocks; this rank's block is already filled.
template <class Communicator, element T>
algorithm allgather(Communicator& comm, std::span<T> all, algorithm forced = algorithm::automatic) {
  if (memory_router* router = routed(all))
    return through_host(*router, comm, [&](std::span<T> host) { return allgather(comm, host, forced); },
                        staged(all, buffer_use::read_write));
  const auto n = static_cast<std::size_t>(comm.size());
  if (all.size() % n != 0)
    throw error(errc::invalid_argument,
                std::to_string(all.size()) + " elements do not split into " + std::to_string(n) + " equal blocks",
                {comm.transport().rank(), -1, "allgather"});
  const std::size_t block = all.size() / n;
  collective::check_if_enabled(comm, {"allgather", block, dtype_of<T>, "", -1});
  const choice made = choose(comm, "allgather", {comm.size(), all.size_bytes()}, forced);
  report(comm, "allgather", all.size_bytes(), dtype_of<T>, made);
  collective::exchange ex(comm, "allgather");
  if (made.chosen == algorithm::ring) collective::allgather_ring(ex, all, block);
  else collective::allgather_recursive_doubling(ex, all, block);
  return made.chosen;
}

template <class Communicator, element T>
algorithm allgather(Communicator& comm, std::span<const T> mine, std::span<T> all,
                    algorithm forced = algorithm::automatic) {
  const std::size_t needed = mine.size() * static_cast<std::size_t>(comm.size());
  if (memory_router* router = routed(mine, all))
    return through_host(
        *router, comm, [&](std::span<const T> in, std::span<T> out) { return allgather(comm, in, out, forced); },
        staged(mine, buffer_use::read), staged(all.first(std::min(needed, all.size())), buffer_use::write));
  collective::check_output(mine, all, needed, comm.transport().rank(), "allgather", false);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(mine.size() * static_cast<std::size_t>(comm.rank())));
  return allgather(comm, all.first(needed), forced);
}

}  // namespace chorus
