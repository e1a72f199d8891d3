// Recursive-doubling allgather for any rank count (Bruck's algorithm,
// machinery/bruck.hpp): log2 rounds, each doubling the run of
// blocks a rank holds, then one rotation into rank order.
//
// Cost: ceil(log2 n) alpha + (n-1)/n S beta (+ one local copy of S).
// Chosen for small messages.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/bruck.hpp>

#include <array>
#include <span>
#include <string_view>

namespace chorus::collective {

namespace algorithms {
struct allgather_recursive_doubling {
  static constexpr algorithm id = algorithm::recursive_doubling;
  static constexpr std::array<std::string_view, 1> aliases{"rd"};
  static constexpr std::string_view cost = "ceil(log2 n) alpha + (n-1)/n S beta (Bruck, any n)";
  static double seconds(const workload& w, const machine& m) {
    return cost::log2_ceil(w.ranks) * m.alpha + cost::share(w.ranks) * double(w.bytes) * m.beta;
  }
  template <class X, class A, class Compute>
  static void run(X& ex, std::span<A> all, std::size_t block, const Compute& compute) {
    collective::bruck_allgather(ex, all, block, compute);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
