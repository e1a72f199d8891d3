// chorus::broadcast: the root's data reaches every rank.
//
//   chorus::broadcast(comm, data, root);
//
// Algorithms: the list in collective/broadcast/broadcast_algorithms.hpp, whose
// defaults (a CHORUS_TUNE string, shown in docs/collectives.md) take shared
// memory on one host and hierarchical across hosts for host buffers, else
// the binomial tree for small buffers (and at 2 ranks) and the pipelined
// chain for large; force one with chorus::algo::tree / chain / shm /
// hierarchical, or tune with CHORUS_TUNE.
#pragma once

#include <chorus/collective/broadcast/broadcast_algorithms.hpp>
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

#include <span>

namespace chorus {

// One body for every memory kind (front_door.hpp): no algorithm computes,
// so the direct path needs no device kernels; staged, the root's buffer is
// read and the others' written.
template <class Communicator, element T>
algorithm broadcast(Communicator& comm, std::span<T> data, int root, algorithm forced = algorithm::automatic) {
  const record::recorded_call recorded(record::recorder_of(comm), record::collective("broadcast", data, {}, root));
  collective::check_root(root, comm.size(), comm.transport().rank(), "broadcast");
  memory_router* const router = routed(data);
  const choice made =
      choose(comm, entry_of<collective::broadcast_algorithms>(),
             {.ranks = comm.size(), .bytes = data.size_bytes(), .host_memory = router == nullptr}, forced);
  const buffer_use use = comm.rank() == root ? buffer_use::read : buffer_use::write;
  if (collective::run_where(comm, router, "broadcast", {{data.data(), data.size_bytes(), use}}, dtype_of<T>, "",
                            !made.moves_host_memory, [&](auto& x, const auto&) {
                              collective::check_if_enabled(
                                  comm, {"broadcast", data.size(), dtype_of<T>, "", root, call_memory(data)});
                              report(comm, "broadcast", data.size_bytes(), dtype_of<T>, made);
                              collective::broadcast_by(x, data, root, made.chosen);
                            }))
    return made.chosen;
  return through_host(
      *router, comm, [&](std::span<T> host) { return broadcast(comm, host, root, forced); }, staged(data, use));
}

}  // namespace chorus
