// chorus::alltoall: block j of rank i's input becomes block i of rank j's
// output. Pairwise exchange: in step s rank r sends to r+s and receives from
// r-s, so every step is a perfect matching with no hot spot.
//
// Cost: (n-1) alpha + (n-1)/n S beta for S = n * block bytes.
//
//   chorus::alltoall(comm, input, output);   // both hold size() blocks of equal count
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/memory_router.hpp>

#include <algorithm>
#include <span>

namespace chorus {

template <class Communicator, element T>
algorithm alltoall(Communicator& comm, std::span<const T> input, std::span<T> output) {
  if (memory_router* router = routed(input, output))
    return through_host(
        *router, comm, [&](std::span<const T> in, std::span<T> out) { return alltoall(comm, in, out); },
        staged(input, buffer_use::read), staged(output.first(std::min(input.size(), output.size())), buffer_use::write));
  const int n = comm.size(), rank = comm.rank();
  if (input.size() % static_cast<std::size_t>(n) != 0)
    throw error(errc::invalid_argument,
                std::to_string(input.size()) + " elements do not split into " + std::to_string(n) + " equal blocks",
                {comm.transport().rank(), -1, "alltoall"});
  collective::check_output(input, output, input.size(), comm.transport().rank(), "alltoall", false);
  const std::size_t block = input.size() / static_cast<std::size_t>(n);
  collective::check_if_enabled(comm, {"alltoall", block, dtype_of<T>, "", -1});
  const choice made = choose(comm, "alltoall", {comm.size(), input.size_bytes()}, algorithm::automatic);
  report(comm, "alltoall", input.size_bytes(), dtype_of<T>, made);
  collective::exchange ex(comm, "alltoall");
  const auto in = [&](int b) { return input.subspan(static_cast<std::size_t>(b) * block, block); };
  const auto out = [&](int b) { return output.subspan(static_cast<std::size_t>(b) * block, block); };
  std::copy(in(rank).begin(), in(rank).end(), out(rank).begin());
  const auto pairings = ex.phase(static_cast<std::uint64_t>(n - 1), "pairwise exchange");
  for (int step = 1; step < n; ++step) {
    const int to = (rank + step) % n, from = (rank - step + n) % n;
    ex.sendrecv(in(to), to, out(from), from, pairings(static_cast<std::uint64_t>(step - 1)));
  }
  return algorithm::automatic;
}

}  // namespace chorus
