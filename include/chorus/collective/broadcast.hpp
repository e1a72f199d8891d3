// chorus::broadcast: the root's data reaches every rank.
//
//   chorus::broadcast(comm, data, root);
//
// Algorithms (collective/selection.hpp): shared memory when every rank is on
// one host, hierarchical across hosts of equal rank counts (both from 16
// KiB, host buffers); else binomial tree up to 256 KiB (and at 2 ranks),
// pipelined chain above; force one with chorus::algo::tree / chain / shm /
// hierarchical, or tune with CHORUS_TUNE.
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/broadcast_algorithms.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/local_steps.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <span>

namespace chorus {

namespace collective {

// A buffer that is not host memory: the direct path where the router takes
// it (every algorithm: none computes, so no device kernels are needed), else
// staged (the root's buffer read, the others' written).
template <class Communicator, element T>
algorithm broadcast_through(memory_router& router, Communicator& comm, std::span<T> data, int root, algorithm forced) {
  check_root(root, comm.size(), comm.transport().rank(), "broadcast");
  const choice made = choose(comm, entry_of<collective::broadcast_algorithms>(),
                             {.ranks = comm.size(), .bytes = data.size_bytes(), .host_memory = false}, forced);
  const routed_buffer view{data.data(), data.size_bytes(), comm.rank() == root ? buffer_use::read : buffer_use::write};
  if (!made.moves_host_memory &&
      run_direct(router, comm, "broadcast", {view}, dtype_of<T>, "", [&](local_arithmetic& where) {
        check_if_enabled(comm, {"broadcast", data.size(), dtype_of<T>, "", root, call_memory(data)});
        report(comm, "broadcast", data.size_bytes(), dtype_of<T>, made);
        exchange ex(comm, "broadcast");
        network_exchange on_network(ex, where);
        broadcast_by(on_network, data, root, made.chosen);
      }))
    return made.chosen;
  return through_host(
      router, comm, [&](std::span<T> host) { return broadcast(comm, host, root, forced); }, staged(data, view.use));
}

}  // namespace collective

template <class Communicator, element T>
algorithm broadcast(Communicator& comm, std::span<T> data, int root, algorithm forced = algorithm::automatic) {
  if (memory_router* router = routed(data)) return collective::broadcast_through(*router, comm, data, root, forced);
  collective::check_root(root, comm.size(), comm.transport().rank(), "broadcast");
  collective::check_if_enabled(comm, {"broadcast", data.size(), dtype_of<T>, "", root, call_memory(data)});
  const choice made =
      choose(comm, entry_of<collective::broadcast_algorithms>(), {comm.size(), data.size_bytes()}, forced);
  report(comm, "broadcast", data.size_bytes(), dtype_of<T>, made);
  collective::exchange ex(comm, "broadcast");
  collective::broadcast_by(ex, data, root, made.chosen);
  return made.chosen;
}

}  // namespace chorus
