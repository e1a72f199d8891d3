// chorus::broadcast: the root's data reaches every rank.
//
//   chorus::broadcast(comm, data, root);
//
// Algorithms: binomial tree up to 256 KiB, pipelined chain above; force one
// with chorus::algo::tree / chorus::algo::chain.
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/broadcast_chain.hpp>
#include <chorus/collective/broadcast_tree.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/report.hpp>
#include <chorus/core/element_type.hpp>

#include <span>

namespace chorus {

inline algorithm broadcast_table(int ranks, std::size_t bytes) noexcept {
  return ranks <= 2 || bytes <= (256u << 10) ? algorithm::tree : algorithm::chain;
}

template <class Communicator, element T>
algorithm broadcast(Communicator& comm, std::span<T> data, int root, algorithm forced = algorithm::automatic) {
  collective::check_root(root, comm.size(), comm.transport().rank(), "broadcast");
  collective::check_if_enabled(comm, {"broadcast", data.size(), dtype_of<T>, "", root});
  const algorithm chosen = collective::pick(forced, broadcast_table(comm.size(), data.size_bytes()),
                                            {algorithm::tree, algorithm::chain}, "broadcast");
  collective::report(comm, "broadcast", data.size_bytes(), dtype_of<T>, chosen, forced == algorithm::automatic ? "table" : "caller");
  collective::exchange ex(comm, "broadcast");
  if (comm.size() > 1) {
    if (chosen == algorithm::chain) collective::broadcast_chain(ex, data, root);
    else collective::broadcast_tree(ex, data, root);
  }
  return chosen;
}

}  // namespace chorus
