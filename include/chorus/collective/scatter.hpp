// chorus::scatter: rank r receives block r of the root's data. The root
// posts all sends at once (linear): S beta out of the root, the bound for
// any scatter.
//
//   chorus::scatter(comm, all, mine, root);   // all (size() * mine.size()) read at the root
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/memory_router.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace chorus {

template <class Communicator, element T>
void scatter(Communicator& comm, std::span<const T> all, std::span<T> mine, int root) {
  if (memory_router* router = routed(all, mine)) {
    const std::size_t used = comm.rank() == root ? all.size() : 0;
    return through_host(
        *router, comm, [&](std::span<const T> in, std::span<T> out) { scatter(comm, in, out, root); },
        staged(all.first(used), buffer_use::read), staged(mine, buffer_use::write));
  }
  const int n = comm.size(), rank = comm.rank(), world = comm.transport().rank();
  collective::check_root(root, n, world, "scatter");
  const std::size_t block = mine.size();
  if (rank == root && all.size() < block * static_cast<std::size_t>(n))
    throw error(errc::invalid_argument,
                "input holds " + std::to_string(all.size()) + " elements, needs " +
                    std::to_string(block * static_cast<std::size_t>(n)),
                {world, -1, "scatter"});
  if (rank == root) collective::check_output(all, mine, block, world, "scatter", false);
  collective::check_if_enabled(comm, {"scatter", block, dtype_of<T>, "", root});
  collective::exchange ex(comm, "scatter");
  const std::uint32_t step = ex.phase(1, "from the root")(0);
  if (rank != root) {
    ex.recv(mine, root, step);
    return;
  }
  const auto slot = [&](int r) { return all.subspan(static_cast<std::size_t>(r) * block, block); };
  std::vector<typename collective::exchange<Communicator>::request> sends;
  for (int r = 0; r < n; ++r)
    if (r != root) sends.push_back(ex.isend(slot(r), r, step));
  std::copy(slot(root).begin(), slot(root).end(), mine.begin());
  ex.wait_all(sends);
}

}  // namespace chorus
