// Linear gather: the root posts every receive at once, (n-1) alpha
// overlapped and S beta into the root, which is the bound for any gather;
// the others send their block. The root's own block is copied, or left
// where it is when the call is in place.
//
// Cost: (n-1) alpha + (n-1)/n S beta at the root, for S = n * block bytes.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/core/element_type.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::collective {

// The linear gather over `ex` (an exchange, or a network_exchange on the
// direct path); `compute` copies the root's own block into place.
template <class X, class Communicator, element T, class Compute>
void gather_by_linear(X& ex, Communicator& comm, std::span<const T> mine, std::span<T> all, int root,
                      const Compute& compute) {
  const int n = comm.size(), rank = comm.rank();
  const std::size_t block = mine.size();
  const std::uint32_t step = ex.phase(1, "to the root")(0);
  if (rank != root) {
    ex.send(mine, root, step);
    return;
  }
  const auto slot = [&](int r) { return all.subspan(static_cast<std::size_t>(r) * block, block); };
  compute.copy(mine, slot(root));
  std::vector<typename X::request> receives;
  for (int r = 0; r < n; ++r)
    if (r != root) receives.push_back(ex.irecv(slot(r), r, step));
  ex.wait_all(receives);
  for (auto& receive : receives) comm.expect_bytes(receive, block * sizeof(T), "gather");
  compute.settle();
}

namespace algorithms {
struct gather_linear {
  static constexpr algorithm id = algorithm::linear;
  static constexpr std::string_view cost = "(n-1) alpha + (n-1)/n S beta into the root, receives posted at once";
  static double seconds(const workload& w, const machine& m) {
    return cost::share(w.ranks) * double(w.bytes) * m.beta + (w.ranks - 1) * m.alpha;
  }
  template <class X, class Communicator, element T, class Compute>
  static void run(X& ex, Communicator& comm, std::span<const T> mine, std::span<T> all, int root,
                  const Compute& compute) {
    collective::gather_by_linear(ex, comm, mine, all, root, compute);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
