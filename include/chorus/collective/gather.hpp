// chorus::gather: the root receives every rank's block, in rank order. The
// root posts all receives at once (linear): (n-1) alpha overlapped, S beta
// into the root, which is the bound for any gather.
//
//   chorus::gather(comm, mine, all, root);   // all (size() * mine.size()) used at the root
//
// At the root `mine` may be its own block of `all` (in place: all + root *
// count); it is then not copied.
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/front_door.hpp>
#include <chorus/collective/local_steps.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/record/call.hpp>
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
    check_output(mine, all, mine.size() * static_cast<std::size_t>(comm.size()), world, "gather",
                 in_place_form::input_at(mine.size() * static_cast<std::size_t>(root)));
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

}  // namespace collective

// One body for every memory kind (front_door.hpp): only bytes move, so the
// direct path needs no device kernels; staged, this rank's block is read
// and the root's output written.
template <class Communicator, element T>
void gather(Communicator& comm, std::span<const T> mine, std::span<T> all, int root) {
  const record::recorded_call recorded(record::recorder_of(comm), record::collective("gather", mine, {}, root));
  collective::check_gather(comm, mine, all, root);
  const std::size_t filled = comm.rank() == root ? mine.size() * static_cast<std::size_t>(comm.size()) : 0;
  memory_router* const router = routed(mine, all);
  if (collective::run_where(
          comm, router, "gather",
          {{mine.data(), mine.size_bytes(), buffer_use::read}, {all.data(), filled * sizeof(T), buffer_use::write}},
          dtype_of<T>, "", true, [&](auto& x, const auto& steps) {
            collective::check_if_enabled(comm, {"gather", mine.size(), dtype_of<T>, "", root, call_memory(mine, all)});
            collective::gather_by(x, comm, mine, all, root, steps);
          }))
    return;
  through_host(
      *router, comm, [&](std::span<const T> host_in, std::span<T> host_out) { gather(comm, host_in, host_out, root); },
      staged(mine, buffer_use::read), staged(all.first(filled), buffer_use::write));
}

}  // namespace chorus
