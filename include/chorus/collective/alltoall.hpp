// chorus::alltoall: block j of rank i's input becomes block i of rank j's
// output. Pairwise exchange: in step s rank r sends to r+s and receives from
// r-s, so every step is a perfect matching with no hot spot.
//
// Cost: (n-1) alpha + (n-1)/n S beta for S = n * block bytes.
//
//   chorus::alltoall(comm, input, output);   // both hold size() blocks of equal count
#pragma once

#include <chorus/collective/arguments.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/front_door.hpp>
#include <chorus/collective/local_steps.hpp>
#include <chorus/collective/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <span>
#include <string_view>

namespace chorus {

namespace collective {

// The block each rank sends to each; throws for sizes that do not split.
template <class Communicator, element T>
std::size_t alltoall_block(const Communicator& comm, std::span<const T> input, std::span<T> output) {
  const auto n = static_cast<std::size_t>(comm.size());
  if (input.size() % n != 0)
    throw error(errc::invalid_argument,
                std::to_string(input.size()) + " elements do not split into " + std::to_string(n) + " equal blocks",
                {comm.transport().rank(), -1, "alltoall"});
  check_output(input, output, input.size(), comm.transport().rank(), "alltoall", in_place_form::none());
  return input.size() / n;
}

// The pairwise exchange over `ex` (an exchange, or a network_exchange on the
// direct path); `steps` copies this rank's own block into place.
template <class X, element T, class Steps>
void alltoall_by(X& ex, std::span<const T> input, std::span<T> output, std::size_t block, const Steps& steps) {
  const int n = ex.size(), rank = ex.rank();
  const auto in = [&](int b) { return input.subspan(static_cast<std::size_t>(b) * block, block); };
  const auto out = [&](int b) { return output.subspan(static_cast<std::size_t>(b) * block, block); };
  steps.copy(in(rank), out(rank));
  const auto pairings = ex.phase(static_cast<std::uint64_t>(n - 1), "pairwise exchange");
  for (int step = 1; step < n; ++step) {
    const int to = (rank + step) % n, from = (rank - step + n) % n;
    ex.sendrecv(in(to), to, out(from), from, pairings(static_cast<std::uint64_t>(step - 1)));
  }
  steps.settle();
}

namespace algorithms {
struct alltoall_pairwise {
  static constexpr algorithm id = algorithm::pairwise;
  static constexpr std::string_view cost = "(n-1) alpha + (n-1)/n S beta; step s pairs r with r+s";
  static double seconds(const workload& w, const machine& m) {
    return (w.ranks - 1) * m.alpha + cost::share(w.ranks) * double(w.bytes) * m.beta;
  }
  template <class X, element T, class Steps>
  static void run(X& ex, std::span<const T> input, std::span<T> output, std::size_t block, const Steps& steps) {
    collective::alltoall_by(ex, input, output, block, steps);
  }
};
}  // namespace algorithms

// Alltoall's list: the pairwise exchange, the one algorithm it has.
struct alltoall_algorithms : algorithm_list<algorithms::alltoall_pairwise> {
  static constexpr std::string_view collective = "alltoall";
  static constexpr std::string_view defaults = "alltoall:0-:pairwise";
};

}  // namespace collective

// One body for every memory kind (front_door.hpp): only bytes move, so the
// direct path needs no device kernels.
template <class Communicator, element T>
algorithm alltoall(Communicator& comm, std::span<const T> input, std::span<T> output) {
  const record::recorded_call recorded(record::recorder_of(comm), record::collective("alltoall", input));
  const std::size_t block = collective::alltoall_block(comm, input, output);
  memory_router* const router = routed(input, output);
  const choice made = choose(comm, entry_of<collective::alltoall_algorithms>(),
                             {.ranks = comm.size(), .bytes = input.size_bytes(), .host_memory = router == nullptr},
                             algorithm::automatic);
  if (collective::run_where(comm, router, "alltoall",
                            {{input.data(), input.size_bytes(), buffer_use::read},
                             {output.data(), input.size_bytes(), buffer_use::write}},
                            dtype_of<T>, "", true, [&](auto& x, const auto& steps) {
                              collective::check_if_enabled(
                                  comm, {"alltoall", block, dtype_of<T>, "", -1, call_memory(input, output)});
                              report(comm, "alltoall", input.size_bytes(), dtype_of<T>, made);
                              collective::alltoall_by(x, input, output, block, steps);
                            }))
    return made.chosen;
  return through_host(
      *router, comm,
      [&](std::span<const T> host_in, std::span<T> host_out) { return alltoall(comm, host_in, host_out); },
      staged(input, buffer_use::read), staged(output.first(input.size()), buffer_use::write));
}

}  // namespace chorus
