// Pairwise alltoall: in step s rank r sends its block for r+s and receives
// the block of r-s, so every step is a perfect matching with no hot spot.
//
// Cost: (n-1) alpha + (n-1)/n S beta for S = n * block bytes.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/core/element_type.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

namespace chorus::collective {

// The pairwise exchange over `ex` (an exchange, or a network_exchange on the
// direct path); `compute` copies this rank's own block into place.
template <class X, element T, class Compute>
void alltoall_by_pairwise(X& ex, std::span<const T> input, std::span<T> output, std::size_t block,
                          const Compute& compute) {
  const int n = ex.size(), rank = ex.rank();
  const auto in = [&](int b) { return input.subspan(static_cast<std::size_t>(b) * block, block); };
  const auto out = [&](int b) { return output.subspan(static_cast<std::size_t>(b) * block, block); };
  compute.copy(in(rank), out(rank));
  const auto pairings = ex.phase(static_cast<std::uint64_t>(n - 1), "pairwise exchange");
  for (int step = 1; step < n; ++step) {
    const int to = (rank + step) % n, from = (rank - step + n) % n;
    ex.sendrecv(in(to), to, out(from), from, pairings(static_cast<std::uint64_t>(step - 1)));
  }
  compute.settle();
}

namespace algorithms {
struct alltoall_pairwise {
  static constexpr algorithm id = algorithm::pairwise;
  static constexpr std::string_view cost = "(n-1) alpha + (n-1)/n S beta; step s pairs r with r+s";
  static double seconds(const workload& w, const machine& m) {
    return (w.ranks - 1) * m.alpha + cost::share(w.ranks) * double(w.bytes) * m.beta;
  }
  template <class X, element T, class Compute>
  static void run(X& ex, std::span<const T> input, std::span<T> output, std::size_t block, const Compute& compute) {
    collective::alltoall_by_pairwise(ex, input, output, block, compute);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
