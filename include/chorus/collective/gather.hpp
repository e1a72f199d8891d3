// chorus::gather: the root receives every rank's block, in rank order. The
// root posts all receives at once (linear): (n-1) alpha overlapped, S beta
// into the root, which is the bound for any gather.
//
//   chorus::gather(comm, mine, all, root);   // all (size() * mine.size()) used at the root
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
void gather(Communicator& comm, std::span<const T> mine, std::span<T> all, int root) {
  if (memory_router* router = routed(mine, all)) {
    const std::size_t filled = comm.rank() == root ? std::min(all.size(), mine.size() * static_cast<std::size_t>(comm.size())) : 0;
    return through_host(
        *router, comm, [&](std::span<const T> in, std::span<T> out) { gather(comm, in, out, root); },
        staged(mine, buffer_use::read), staged(all.first(filled), buffer_use::write));
  }
  const int n = comm.size(), rank = comm.rank(), world = comm.transport().rank();
  collective::check_root(root, n, world, "gather");
  const std::size_t block = mine.size();
  if (rank == root) collective::check_output(mine, all, block * static_cast<std::size_t>(n), world, "gather", false);
  collective::check_if_enabled(comm, {"gather", block, dtype_of<T>, "", root});
  collective::exchange ex(comm, "gather");
  const std::uint32_t step = ex.phase(1, "to the root")(0);
  if (rank != root) {
    ex.send(mine, root, step);
    return;
  }
  const auto slot = [&](int r) { return all.subspan(static_cast<std::size_t>(r) * block, block); };
  std::copy(mine.begin(), mine.end(), slot(root).begin());
  std::vector<typename collective::exchange<Communicator>::request> receives;
  for (int r = 0; r < n; ++r)
    if (r != root) receives.push_back(ex.irecv(slot(r), r, step));
  ex.wait_all(receives);
  for (auto& receive : receives) comm.expect_bytes(receive, block * sizeof(T), "gather");
}

}  // namespace chorus
