// Which allreduce algorithm runs: the caller's choice, else
// CHORUS_ALLREDUCE_ALGO, else the decision table below, measured on the
// development machine (see the table's comment). The choice is reported:
// allreduce() returns it, choose_allreduce() predicts it, and CHORUS_DEBUG=1
// logs it.
#pragma once

#include <chorus/core/algorithm.hpp>
#include <chorus/core/env.hpp>
#include <chorus/core/variables.hpp>
#include <chorus/core/error.hpp>

#include <cstddef>
#include <optional>
#include <string>

namespace chorus {

// Decision table keyed on (ranks, bytes), from bench/allreduce_sweep on the
// development machine (2 cores, UCX shared memory; the sweeps for 2, 3, 4
// and 8 ranks are in docs/decision_table.md):
// - up to 8 KiB (4 KiB at 2 ranks) latency dominates: recursive doubling,
//   fewest rounds, wins at every rank count (2x faster than the ring at 4);
// - 2 ranks: the ring above that (pipelined segments beat one big swap);
// - 3+ ranks, 8 KiB..2 MiB: Rabenseifner, bandwidth-optimal with log(n)
//   latency terms where the ring pays 2(n-1);
// - 3+ ranks, 2 MiB and up: the ring, whose segment pipelining keeps both
//   directions busy (15-50% ahead of Rabenseifner at 4 and 8 ranks).
inline algorithm allreduce_table(int ranks, std::size_t bytes) noexcept {
  if (ranks <= 1 || bytes <= (ranks == 2 ? 4u << 10 : 8u << 10)) return algorithm::recursive_doubling;
  if (ranks == 2) return algorithm::ring;
  if (bytes < (2u << 20)) return algorithm::rabenseifner;
  return algorithm::ring;
}

struct allreduce_choice {
  algorithm chosen;
  const char* reason;  // "caller", "CHORUS_ALLREDUCE_ALGO" or "table"
};

// `configured` is CHORUS_ALLREDUCE_ALGO, parsed and checked once (a
// communicator does it at init); automatic when unset or "auto".
inline allreduce_choice choose_allreduce(int ranks, std::size_t bytes, algorithm forced, algorithm configured) {
  if (forced != algorithm::automatic) return {require_allreduce_algorithm(forced, "the caller"), "caller"};
  if (configured != algorithm::automatic) return {configured, "CHORUS_ALLREDUCE_ALGO"};
  return {allreduce_table(ranks, bytes), "table"};
}

inline allreduce_choice choose_allreduce(int ranks, std::size_t bytes, algorithm forced = algorithm::automatic) {
  return choose_allreduce(ranks, bytes, forced, variables::allreduce_algorithm());
}

}  // namespace chorus
