// chorus::allgather: every rank contributes `mine` (the same count on every
// rank) and receives all contributions in rank order.
//
//   chorus::allgather(comm, mine, all);      // all.size() >= size * mine.size()
//   chorus::allgather(comm, all);            // in place: own block at rank * count
//
// Algorithms: recursive doubling (Bruck, any n) for up to 64 KiB in total,
// ring above; force one with chorus::algo::ring / chorus::algo::rd.
#pragma once

#include <chorus/collective/allgather_recursive_doubling.hpp>
#include <chorus/collective/allgather_ring.hpp>
#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/report.hpp>
#include <chorus/core/element_type.hpp>

#include <algorithm>
#include <span>

namespace chorus {

inline algorithm allgather_table(int, std::size_t total_bytes) noexcept {
  return total_bytes <= (64u << 10) ? algorithm::recursive_doubling : algorithm::ring;
}

// In place: `all` holds size() blocks; this rank's block is already filled.
template <class Communicator, element T>
algorithm allgather(Communicator& comm, std::span<T> all, algorithm forced = algorithm::automatic) {
  const auto n = static_cast<std::size_t>(comm.size());
  if (all.size() % n != 0)
    throw error(errc::invalid_argument,
                std::to_string(all.size()) + " elements do not split into " + std::to_string(n) + " equal blocks",
                {comm.transport().rank(), -1, "allgather"});
  const std::size_t block = all.size() / n;
  collective::check_if_enabled(comm, {"allgather", block, dtype_of<T>, "", -1});
  const algorithm chosen = collective::pick(forced, allgather_table(comm.size(), all.size_bytes()),
                                            {algorithm::ring, algorithm::recursive_doubling}, "allgather");
  collective::report(comm, "allgather", all.size_bytes(), dtype_of<T>, chosen, forced == algorithm::automatic ? "table" : "caller");
  collective::exchange ex(comm, "allgather");
  if (chosen == algorithm::ring) collective::allgather_ring(ex, all, block);
  else collective::allgather_recursive_doubling(ex, all, block);
  return chosen;
}

template <class Communicator, element T>
algorithm allgather(Communicator& comm, std::span<const T> mine, std::span<T> all,
                    algorithm forced = algorithm::automatic) {
  const std::size_t needed = mine.size() * static_cast<std::size_t>(comm.size());
  collective::check_output(mine, all, needed, comm.transport().rank(), "allgather", false);
  std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(mine.size() * static_cast<std::size_t>(comm.rank())));
  return allgather(comm, all.first(needed), forced);
}

}  // namespace chorus
