// chorus::gather: the root receives every rank's block, in rank order. The
// root posts all receives at once (linear): (n-1) alpha overlapped, S beta
// into the root, which is the bound for any gather.
//
//   chorus::gather(comm, mine, all, root);   // all (size() * mine.size()) used at the root
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/local_steps.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <span>
#include <vector>

namespace chorus {

namespace collective {

// The checks every rank makes before a gather.
template <class Communicator, element T>
void check_gather(const Communicator& comm, std::span<const T> mine, std::span<T> all, int root) {
  const int world = comm.transport().rank();
  check_root(root, comm.size(), world, "gather");
  if (comm.rank() == root)
    check_output(mine, all, mine.size() * static_cast<std::size_t>(comm.size()), world, "gather", false);
}

// The gather's messages over `ex` (an exchange, or a network_exchange on the
// direct path); `steps` copies the root's own block into place.
template <class X, class Communicator, element T, class Steps>
void gather_by(X& ex, Communicator& comm, std::span<const T> mine, std::span<T> all, int root, const Steps& steps) {
  const int n = comm.size(), rank = comm.rank();
  const std::size_t block = mine.size();
  const std::uint32_t step = ex.phase(1, "to the root")(0);
  if (rank != root) {
    ex.send(mine, root, step);
    return;
  }
  const auto slot = [&](int r) { return all.subspan(static_cast<std::size_t>(r) * block, block); };
  steps.copy(mine, slot(root));
  std::vector<typename X::request> receives;
  for (int r = 0; r < n; ++r)
    if (r != root) receives.push_back(ex.irecv(slot(r), r, step));
  ex.wait_all(receives);
  for (auto& receive : receives) comm.expect_bytes(receive, block * sizeof(T), "gather");
  steps.settle();
}

// Buffers that are not host memory: direct where the router takes them
// (only bytes move: no device kernels needed), else staged.
template <class Communicator, element T>
void gather_through(memory_router& router, Communicator& comm, std::span<const T> mine, std::span<T> all, int root) {
  check_gather(comm, mine, all, root);
  const std::size_t filled = comm.rank() == root ? mine.size() * static_cast<std::size_t>(comm.size()) : 0;
  const routed_buffer in{mine.data(), mine.size_bytes(), buffer_use::read};
  const routed_buffer out{all.data(), filled * sizeof(T), buffer_use::write};
  if (run_direct(router, comm, "gather", {in, out}, dtype_of<T>, "", [&](local_arithmetic& where) {
        check_if_enabled(comm, {"gather", mine.size(), dtype_of<T>, "", root, call_memory(mine, all)});
        exchange ex(comm, "gather");
        network_exchange on_network(ex, where);
        gather_by(on_network, comm, mine, all, root, routed_steps(where));
      }))
    return;
  through_host(
      router, comm, [&](std::span<const T> host_in, std::span<T> host_out) { gather(comm, host_in, host_out, root); },
      staged(mine, buffer_use::read), staged(all.first(filled), buffer_use::write));
}

}  // namespace collective

template <class Communicator, element T>
void gather(Communicator& comm, std::span<const T> mine, std::span<T> all, int root) {
  if (memory_router* router = routed(mine, all)) return collective::gather_through(*router, comm, mine, all, root);
  collective::check_gather(comm, mine, all, root);
  collective::check_if_enabled(comm, {"gather", mine.size(), dtype_of<T>, "", root, call_memory(mine, all)});
  collective::exchange ex(comm, "gather");
  collective::gather_by(ex, comm, mine, all, root, collective::host_steps{});
}

}  // namespace chorus
