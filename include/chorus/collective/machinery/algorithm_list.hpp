// One list per collective: the algorithms it offers, each a type that
// describes itself. From the list come the names a caller, CHORUS_TUNE and
// CHORUS_ALLREDUCE_ALGO may use, the registry's rows (collective/
// selection.hpp), the docs' tables (tools/doc_tables) and the dispatch: a
// front door runs the chosen algorithm by visiting its list, with no
// switch and no default case. Adding an algorithm is one header that
// defines its type and one line in its collective's list.
//
// An algorithm type has
//   static constexpr algorithm id;                  its name (core/algorithm.hpp)
//   static constexpr std::string_view cost;         its cost formula, for people (the docs' tables)
//   static double seconds(const workload&, const machine&);
//                                                   the same formula as a number: the cost model
//   static void run(...);                           the collective's own signature (its list header says)
// and may have
//   static constexpr std::array<std::string_view, N> aliases;   other spellings ("rd")
//   static bool feasible(const workload&);          whether it can run there (default: anywhere)
//   static bool suits(const workload&);             whether the defaults and the cost model may take it
//                                                   (default: where feasible)
//   static constexpr bool moves_host_memory;        it copies through a host's shared memory: device
//                                                   buffers are staged for it and the defaults skip it
//   static constexpr std::string_view needs;        what suits() asks, for people
//
// Costs: n ranks, S bytes, alpha per message, beta per byte moved, gamma
// per byte reduced; p = the power of two at or below n (the others fold).
// The constants are the machine's (core/machine.hpp: the defaults, or a
// calibration's, on the call's path).
#pragma once

#include <chorus/core/algorithm.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/machine.hpp>

#include <array>
#include <bit>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace chorus {

// What a choice depends on.
struct workload {
  int ranks = 1;
  std::size_t bytes = 0;        // as CHORUS_TUNE counts them (core/tuning.hpp)
  bool reencodes_well = false;  // compressed_allreduce: the codec survives re-encoding (fp16, bf16)
  bool sparse = false;          // compressed_allreduce: the codec keeps a subset (top-k, random-k)
  int hosts = 1;                // hosts the ranks are on (comm/host_layout.hpp)
  int ranks_per_host = 0;       // ranks on each host when all hold the same number, else 0 (1 host: any)
  bool host_memory = true;      // false for device buffers: the defaults keep them off shared memory
  bool between_hosts = false;   // the group inside a hierarchical collective: one rank per host, the network only
};

namespace cost {

inline double log2_floor(int n) noexcept { return n < 2 ? 0.0 : double(std::bit_width(unsigned(n)) - 1); }
inline double log2_ceil(int n) noexcept { return n < 2 ? 0.0 : double(std::bit_width(unsigned(n - 1))); }
inline int power_of_two_below(int n) noexcept { return n < 1 ? 1 : int(std::bit_floor(unsigned(n))); }
// The ranks beyond p hand their data to a partner and get the result back.
inline double folding(const workload& w, const machine& m) noexcept {
  return w.ranks == power_of_two_below(w.ranks) ? 0.0 : 2 * (m.alpha + double(w.bytes) * m.beta);
}
// Shared-memory steps of at most 512 KiB each (collective/machinery/shared_memory_channel.hpp).
inline double memory_steps(std::size_t bytes) noexcept { return double(bytes / (512u << 10) + 1); }
// The share of the whole each rank moves in a bandwidth-optimal algorithm.
inline double share(int n) noexcept { return n < 1 ? 0.0 : double(n - 1) / n; }

}  // namespace cost

// A communicator that knows which host each rank is on: the algorithms
// that move memory between a host's ranks need one.
template <class Communicator>
concept knows_its_hosts = requires(const Communicator& comm) { comm.layout(); };

// What every collective's shared-memory form shares: it copies through this
// host's memory, so it runs on host buffers with every rank on one host.
struct shared_memory_form {
  static constexpr algorithm id = algorithm::shared_memory;
  static constexpr std::array<std::string_view, 1> aliases{"shm"};
  static constexpr bool moves_host_memory = true;
  static constexpr std::string_view needs = "every rank on one host";
  static bool feasible(const workload& w) { return w.hosts == 1 && !w.between_hosts; }
  static bool suits(const workload& w) { return feasible(w) && w.ranks >= 2; }
};

// And every hierarchical form's: shared memory in each host, the network
// between one rank per host and slice; on one host it is shared memory.
struct hierarchical_form {
  static constexpr algorithm id = algorithm::hierarchical;
  static constexpr bool moves_host_memory = true;
  static constexpr std::string_view needs = "several hosts holding equal numbers (> 1) of ranks";
  static bool feasible(const workload& w) { return (w.hosts == 1 || w.ranks_per_host > 0) && !w.between_hosts; }
  static bool suits(const workload& w) { return w.hosts > 1 && w.ranks_per_host > 1 && !w.between_hosts; }
};

// What a dispatch says of an algorithm whose run() does not take this
// call's arguments: shared memory needs a whole communicator's exchange,
// not a group inside a hierarchical collective or the direct path's.
template <class Algorithm>
[[noreturn]] void cannot_run_here(std::string_view collective) {
  throw error(errc::invalid_argument,
              std::string(collective) + " cannot run " + std::string(Algorithm::id.name()) + " on these buffers");
}

// A row of the registry: one algorithm, type-erased.
struct algorithm_facts {
  algorithm id;
  std::span<const std::string_view> aliases;
  std::string_view cost;
  double (*seconds)(const workload&, const machine&);
  bool (*feasible)(const workload&);
  bool (*suits)(const workload&);
  bool moves_host_memory;
  std::string_view needs;

  constexpr bool answers_to(const algorithm& named) const noexcept {
    if (named == id) return true;
    for (std::string_view alias : aliases)
      if (named.name() == alias) return true;
    return false;
  }
  // Whether the defaults and the cost model may take it for `w`.
  bool chosen_by_default_for(const workload& w) const {
    return feasible(w) && suits(w) && (w.host_memory || !moves_host_memory);
  }
};

namespace detail {

template <class A>
constexpr algorithm_facts facts_of() {
  algorithm_facts row{A::id, {}, A::cost, &A::seconds, nullptr, nullptr, false, {}};
  if constexpr (requires { A::aliases; }) row.aliases = A::aliases;
  if constexpr (requires(const workload& w) { A::feasible(w); })
    row.feasible = &A::feasible;
  else
    row.feasible = [](const workload&) { return true; };
  if constexpr (requires(const workload& w) { A::suits(w); })
    row.suits = &A::suits;
  else
    row.suits = row.feasible;
  if constexpr (requires { A::moves_host_memory; }) row.moves_host_memory = A::moves_host_memory;
  if constexpr (requires { A::needs; }) row.needs = A::needs;
  return row;
}

// Runs Algorithm with `args` if its run() takes them here, else says it cannot.
template <class Algorithm, class... Args>
void run_if_it_takes(std::string_view collective, Args&... args) {
  if constexpr (requires { Algorithm::run(args...); })
    Algorithm::run(args...);
  else
    cannot_run_here<Algorithm>(collective);
}

template <class... Algorithms>
constexpr bool names_distinct() {
  const std::array<algorithm, sizeof...(Algorithms)> ids{Algorithms::id...};
  for (std::size_t i = 0; i < ids.size(); ++i)
    for (std::size_t j = i + 1; j < ids.size(); ++j)
      if (ids[i] == ids[j]) return false;
  return true;
}

}  // namespace detail

template <class... Algorithms>
struct algorithm_list {
  static_assert(sizeof...(Algorithms) > 0, "a collective offers at least one algorithm");
  static_assert(detail::names_distinct<Algorithms...>(), "two algorithms of one collective share a name");

  static constexpr std::array<algorithm_facts, sizeof...(Algorithms)> facts{detail::facts_of<Algorithms>()...};

  // Calls visit.template operator()<A>() for the algorithm A named
  // `chosen`. The registry checked `chosen` against this list, so the error
  // below is a bug, said plainly rather than run as another algorithm.
  template <class Visit>
  static void run(std::string_view collective, const algorithm& chosen, Visit&& visit) {
    if (!((Algorithms::id == chosen && (visit.template operator()<Algorithms>(), true)) || ...))
      not_offered(collective, chosen);
  }

  // Runs the algorithm named `chosen` with `args`, the collective's own
  // signature (its list header says); one whose run() does not take them
  // (shared memory given a group inside a hierarchical form, or the direct
  // path's exchange) is cannot_run_here's error.
  template <class... Args>
  static void run_with(std::string_view collective, const algorithm& chosen, Args&... args) {
    if (!((Algorithms::id == chosen && (detail::run_if_it_takes<Algorithms>(collective, args...), true)) || ...))
      not_offered(collective, chosen);
  }

 private:
  [[noreturn]] static void not_offered(std::string_view collective, const algorithm& chosen) {
    throw error(errc::invalid_argument,
                std::string(chosen.name()) + " is not an algorithm of " + std::string(collective));
  }
};

}  // namespace chorus
