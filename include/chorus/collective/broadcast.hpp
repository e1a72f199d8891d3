// chorus::broadcast: the root's data reaches every rank.
//
//   chorus::broadcast(comm, data, root);
//
// Algorithms (collective/selection.hpp): binomial tree up to 256 KiB (and
// at 2 ranks), pipelined chain above; force one with chorus::algo::tree /
// chorus::algo::chain, or tune with CHORUS_TUNE.
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/broadcast_chain.hpp>
#include <chorus/collective/broadcast_tree.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/memory_router.hpp>

#include <span>

namespace chorus {

template <class Communicator, element T>
algorithm broadcast(Communicator& comm, std::span<T> data, int root, algorithm forced = algorithm::automatic) {
  if (memory_router* router = routed(data))
    return through_host(*router, comm, [&](std::span<T> host) { return broadcast(comm, host, root, forced); },
                        staged(data, comm.rank() == root ? buffer_use::read : buffer_use::write));
  collective::check_root(root, comm.size(), comm.transport().rank(), "broadcast");
  collective::check_if_enabled(comm, {"broadcast", data.size(), dtype_of<T>, "", root});
  const choice made = choose(comm, "broadcast", {comm.size(), data.size_bytes()}, forced);
  report(comm, "broadcast", data.size_bytes(), dtype_of<T>, made);
  collective::exchange ex(comm, "broadcast");
  if (comm.size() > 1) {
    if (made.chosen == algorithm::chain) collective::broadcast_chain(ex, data, root);
    else collective::broadcast_tree(ex, data, root);
  }
  return made.chosen;
}

}  // namespace chorus
