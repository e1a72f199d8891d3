// The one selection registry: for every collective (and the compressed
// allreduce's two schemes) the algorithms it offers, each with its cost and
// when the measured table picks it, and one way of choosing among them, in
// this order:
//   1. the caller's argument (chorus::algo::ring), checked against the list;
//   2. CHORUS_TUNE (core/tuning.hpp): rules by collective, ranks and size;
//   3. CHORUS_ALLREDUCE_ALGO, for allreduce (the older, one-word override);
//   4. the collective's measured table below.
// Every call says what ran and why: the collective returns the algorithm,
// chorus::choose() predicts it with its reason, and CHORUS_DEBUG=1 logs a
// line per call. bench/sweep measures every algorithm of a collective and
// prints the CHORUS_TUNE string its timings imply. The GPU issues register
// device algorithms and NCCL as further entries here.
//
// Costs: n ranks, S bytes, alpha per message, beta per byte moved, gamma
// per byte reduced; p = the power of two at or below n (the others fold).
#pragma once

#include <chorus/core/algorithm.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/log.hpp>
#include <chorus/core/tuning.hpp>
#include <chorus/core/variables.hpp>

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace chorus {

// What a table decides on.
struct workload {
  int ranks = 1;
  std::size_t bytes = 0;        // as CHORUS_TUNE counts them (core/tuning.hpp)
  bool reencodes_well = false;  // compressed_allreduce: the codec survives re-encoding (fp16, bf16)
  bool sparse = false;          // compressed_allreduce: the codec keeps a subset (top-k, random-k)
  int hosts = 1;                // hosts the ranks are on (comm/host_layout.hpp)
  int ranks_per_host = 0;       // ranks on each host when all hold the same number, else 0 (1 host: any)
  bool host_memory = true;      // false for device buffers: the table keeps them off shared memory
  bool between_hosts = false;   // the group inside a hierarchical collective: one rank per host, the network only
};

// Whether `chosen` can run for `w`: shared memory needs every rank on one
// host, the hierarchical algorithms hosts that hold equal numbers of ranks.
inline bool feasible(algorithm chosen, const workload& w) noexcept {
  if (chosen == algorithm::shared_memory) return w.hosts == 1 && !w.between_hosts;
  if (chosen == algorithm::hierarchical) return (w.hosts == 1 || w.ranks_per_host > 0) && !w.between_hosts;
  return true;
}

// Algorithms that copy through a host's shared memory: the table keeps
// device buffers off them (the direct path moves those without a host
// copy), and a caller who forces one on device buffers gets them staged.
constexpr bool moves_host_memory(algorithm chosen) noexcept {
  return chosen == algorithm::shared_memory || chosen == algorithm::hierarchical;
}

struct algorithm_entry {
  algorithm id;
  std::string_view cost;
  std::string_view when;  // when the table picks it
};

struct collective_entry {
  std::string_view name;
  std::span<const algorithm_entry> algorithms;
  algorithm (*table)(const workload&) noexcept;
};

// The measured tables: bench/sweep on the development machine (2 cores, UCX
// shared memory; docs/decision_table.md has the allreduce sweeps for 2, 3,
// 4 and 8 ranks, docs/performance.md the compressed ones).
namespace tables {

// Inside one host, shared memory from 16 KiB for allreduce, allgather,
// reduce_scatter and broadcast (below it the network algorithms' few small
// messages through UCX are as fast); across hosts that hold several ranks
// each, the hierarchical algorithms from the same size (shared memory
// inside each host, the network only between them). Each table below is
// this, then its network table.
inline constexpr std::size_t shared_memory_min_bytes = 16u << 10;
inline algorithm by_host_then(const workload& w, algorithm (*over_network)(const workload&)) noexcept {
  if (w.ranks >= 2 && w.bytes >= shared_memory_min_bytes && w.host_memory) {
    if (w.hosts == 1) return algorithm::shared_memory;
    if (w.ranks_per_host > 1) return algorithm::hierarchical;
  }
  return over_network(w);
}

// Allreduce: up to 8 KiB (4 KiB at 2 ranks) latency dominates and recursive
// doubling's log2(n) rounds win at every rank count (2x the ring at 4);
// 2 ranks: the ring above that (pipelined segments beat one big swap);
// 3+ ranks: Rabenseifner to 2 MiB (bandwidth-optimal with log(n) latency
// where the ring pays 2(n-1)), the ring from 2 MiB, whose pipelining keeps
// both directions busy (15-50% ahead of Rabenseifner at 4 and 8 ranks).
inline algorithm allreduce_over_network(const workload& w) noexcept {
  if (w.ranks <= 1 || w.bytes <= (w.ranks == 2 ? 4u << 10 : 8u << 10)) return algorithm::recursive_doubling;
  if (w.ranks == 2) return algorithm::ring;
  return w.bytes < (2u << 20) ? algorithm::rabenseifner : algorithm::ring;
}
inline algorithm allreduce(const workload& w) noexcept { return by_host_then(w, allreduce_over_network); }
// Allgather and reduce_scatter (bytes: all n blocks): the log-round
// algorithms up to 64 KiB, the pipelined ring above.
inline algorithm allgather_over_network(const workload& w) noexcept {
  return w.bytes <= (64u << 10) ? algorithm::recursive_doubling : algorithm::ring;
}
inline algorithm reduce_scatter_over_network(const workload& w) noexcept {
  return w.bytes <= (64u << 10) ? algorithm::recursive_halving : algorithm::ring;
}
inline algorithm allgather(const workload& w) noexcept { return by_host_then(w, allgather_over_network); }
inline algorithm reduce_scatter(const workload& w) noexcept { return by_host_then(w, reduce_scatter_over_network); }
// Broadcast: the binomial tree up to 256 KiB (and always at 2 ranks, where
// it is one message), the pipelined chain above.
inline algorithm broadcast_over_network(const workload& w) noexcept {
  return w.ranks <= 2 || w.bytes <= (256u << 10) ? algorithm::tree : algorithm::chain;
}
inline algorithm broadcast(const workload& w) noexcept { return by_host_then(w, broadcast_over_network); }
// Compressed allreduce (bytes: encoded): below 1 MiB encoded the encode-once
// scheme's 2 latency terms beat the ring's 2 (n-1); above it the ring's
// steady use of one link each way wins, for codecs that re-encode well.
inline constexpr std::size_t ring_min_encoded_bytes = 1u << 20;
inline algorithm compressed_allreduce(const workload& w) noexcept {
  if (w.sparse) return algorithm::sparse;          // the only scheme that moves sparse codecs
  if (w.ranks < 2) return algorithm::encode_once;  // with one rank the two are the same
  return w.reencodes_well && w.bytes >= ring_min_encoded_bytes ? algorithm::ring : algorithm::encode_once;
}
// One algorithm each, registered so that they report like the others.
inline algorithm reduce(const workload&) noexcept { return algorithm::tree; }
inline algorithm alltoall(const workload&) noexcept { return algorithm::pairwise; }

}  // namespace tables

namespace detail {

inline constexpr algorithm_entry allreduce_algorithms[] = {
    {algorithm::recursive_doubling, "log2(p) (alpha + S beta + S gamma), + 2 (alpha + S beta) folding",
     "up to 8 KiB (4 KiB at 2 ranks)"},
    {algorithm::rabenseifner, "2 log2(p) alpha + 2 (p-1)/p S beta + (p-1)/p S gamma, + 2 (alpha + S beta) folding",
     "3+ ranks, 8 KiB to 2 MiB"},
    {algorithm::ring, "2 (n-1) alpha + 2 (n-1)/n S beta + (n-1)/n S gamma, pipelined in segments",
     "2 ranks above 4 KiB; 3+ ranks from 2 MiB"},
    {algorithm::tree, "2 ceil(log2 n) (alpha + S beta) + log2(n) S gamma", "never (forced or tuned only)"},
    {algorithm::shared_memory, "3 flag round trips per 512 KiB step + 3 S of memory traffic per rank + S/n gamma",
     "every rank on one host, from 16 KiB"},
    {algorithm::hierarchical,
     "shared memory in each host + allreduce of S/L among the h hosts' L-th ranks: 2 (h-1)/h S/L beta per rank",
     "several hosts holding equal numbers (> 1) of ranks, from 16 KiB"},
};
inline constexpr algorithm_entry allgather_algorithms[] = {
    {algorithm::recursive_doubling, "ceil(log2 n) alpha + (n-1)/n S beta (Bruck, any n)", "up to 64 KiB in all"},
    {algorithm::ring, "(n-1) alpha + (n-1)/n S beta, pipelined in segments", "above 64 KiB"},
    {algorithm::shared_memory, "S/n + (n-1)/n S of memory traffic per rank, a flag round trip per step",
     "every rank on one host, from 16 KiB in all"},
    {algorithm::hierarchical, "allgather of S/L among the h hosts' L-th ranks, (h-1)/h S/L beta, then shared memory",
     "several hosts holding equal numbers (> 1) of ranks, from 16 KiB in all"},
};
inline constexpr algorithm_entry reduce_scatter_algorithms[] = {
    {algorithm::recursive_halving, "log2(p) alpha + (p-1)/p S beta + (p-1)/p S gamma, + folding",
     "up to 64 KiB of input"},
    {algorithm::ring, "(n-1) alpha + (n-1)/n S beta + (n-1)/n S gamma, pipelined in segments", "above 64 KiB"},
    {algorithm::shared_memory, "(n-1)/n S + S of memory traffic per rank + S/n gamma, 2 flag round trips per step",
     "every rank on one host, from 16 KiB of input"},
    {algorithm::hierarchical,
     "shared memory, then reduce_scatter of S/L among the h hosts' L-th ranks, (h-1)/h S/L beta",
     "several hosts holding equal numbers (> 1) of ranks, from 16 KiB of input"},
};
inline constexpr algorithm_entry broadcast_algorithms[] = {
    {algorithm::tree, "ceil(log2 n) (alpha + S beta)", "2 ranks, or up to 256 KiB"},
    {algorithm::chain, "(n - 2 + S/s) (alpha + s beta), segments of s bytes", "3+ ranks above 256 KiB"},
    {algorithm::shared_memory, "S of memory traffic per rank, a flag round trip per 512 KiB",
     "every rank on one host, from 16 KiB"},
    {algorithm::hierarchical,
     "tree or chain among the root's local peers on each host (S into each host once), then shared memory",
     "several hosts holding equal numbers (> 1) of ranks, from 16 KiB"},
};
inline constexpr algorithm_entry compressed_allreduce_algorithms[] = {
    {algorithm::encode_once, "n alpha + 2 (n-1)/n S_enc beta + S gamma_codec, each contribution encoded once",
     "int8 and onebit always; fp16 and bf16 under 1 MiB encoded"},
    {algorithm::ring, "2 (n-1) alpha + 2 (n-1)/n S_enc beta + S gamma_codec, partial sums re-encoded per hop",
     "fp16 and bf16 from 1 MiB encoded"},
    {algorithm::sparse,
     "top-k: allgather of 8k B per rank, (n-1) alpha + (n-1) 8k beta; random-k: allreduce of 4k B + 16 B",
     "sparse codecs (topk, randomk) always, and only they"},
};
inline constexpr algorithm_entry reduce_algorithms[] = {
    {algorithm::tree, "ceil(log2 n) (alpha + S beta + S gamma), binomial", "always (the only one)"},
};
inline constexpr algorithm_entry alltoall_algorithms[] = {
    {algorithm::pairwise, "(n-1) alpha + (n-1)/n S beta; step s pairs r with r+s", "always (the only one)"},
};

}  // namespace detail

inline constexpr std::array<collective_entry, 7> registry{{
    {"allreduce", detail::allreduce_algorithms, tables::allreduce},
    {"allgather", detail::allgather_algorithms, tables::allgather},
    {"reduce_scatter", detail::reduce_scatter_algorithms, tables::reduce_scatter},
    {"broadcast", detail::broadcast_algorithms, tables::broadcast},
    {"compressed_allreduce", detail::compressed_allreduce_algorithms, tables::compressed_allreduce},
    {"reduce", detail::reduce_algorithms, tables::reduce},
    {"alltoall", detail::alltoall_algorithms, tables::alltoall},
}};

inline const collective_entry& registered(std::string_view collective) {
  for (const collective_entry& entry : registry)
    if (entry.name == collective) return entry;
  throw error(errc::invalid_argument,
              "'" + std::string(collective) + "' is not a collective with a choice of algorithm");
}

// What runs and why: "caller", the CHORUS_TUNE rule, "CHORUS_ALLREDUCE_ALGO"
// or "table".
struct choice {
  algorithm chosen = algorithm::automatic;
  std::string reason;
};

// Between hosts (inside a hierarchical collective) a rule or setting that
// names an algorithm which cannot run there (shared memory, hierarchical) is
// passed over: it was written for the whole call.
inline choice choose(std::string_view collective, const workload& work, algorithm forced, const tuning& rules,
                     algorithm configured_allreduce) {
  const collective_entry& entry = registered(collective);
  if (forced != algorithm::automatic) return {require_offered(entry.name, forced, "the caller"), "caller"};
  const auto usable = [&](algorithm chosen) { return !work.between_hosts || feasible(chosen, work); };
  for (const tuning_rule& rule : rules.rules)
    if (rule.matches(entry.name, work.ranks, work.bytes) && usable(rule.chosen)) return {rule.chosen, rule.text};
  if (entry.name == "allreduce" && configured_allreduce != algorithm::automatic && usable(configured_allreduce))
    return {configured_allreduce, "CHORUS_ALLREDUCE_ALGO"};
  return {entry.table(work), "table"};
}

// The choice a communicator makes: its settings hold CHORUS_TUNE and
// CHORUS_ALLREDUCE_ALGO, parsed once at init.
// The communicator adds where its ranks are (host_layout); an algorithm
// that cannot run there (forced, tuned or configured) is an error that
// says why.
template <class Communicator>
choice choose(const Communicator& comm, std::string_view collective, workload work, algorithm forced) {
  if constexpr (requires { comm.layout(); }) {
    work.hosts = comm.layout().hosts;
    work.ranks_per_host = comm.layout().ranks_per_host;
  }
  choice made = choose(collective, work, forced, comm.config().tune, comm.config().allreduce_algorithm);
  if (!feasible(made.chosen, work))
    throw error(errc::invalid_argument,
                std::string(collective) + " with " + std::string(to_string(made.chosen)) + " (" + made.reason + "): " +
                    (made.chosen == algorithm::shared_memory
                         ? "the ranks are on " + std::to_string(work.hosts) + " hosts, not one"
                         : std::string("the hosts hold different numbers of ranks")),
                {comm.transport().rank(), -1, std::string(collective)});
  return made;
}

// The choice inside a hierarchical collective: among `ranks` ranks, one on
// each host, that share a local rank, over the network only. CHORUS_TUNE
// reaches it as it reaches any call of `collective` over that many ranks,
// and CHORUS_DEBUG reports it ("between hosts").
template <class Communicator>
choice choose_between_hosts(const Communicator& comm, std::string_view collective, int ranks, std::size_t bytes) {
  const workload work{.ranks = ranks, .bytes = bytes, .hosts = ranks, .ranks_per_host = 1, .between_hosts = true};
  return choose(collective, work, algorithm::automatic, comm.config().tune, comm.config().allreduce_algorithm);
}

// A prediction outside any communicator, from the environment as it is now.
inline choice choose(std::string_view collective, const workload& work, algorithm forced = algorithm::automatic) {
  return choose(collective, work, forced, tuning_from_environment(), variables::allreduce_algorithm());
}

inline choice choose_allreduce(int ranks, std::size_t bytes, algorithm forced = algorithm::automatic) {
  return choose("allreduce", {ranks, bytes}, forced);
}

// Backends: communicators whose collectives are another library's rather
// than an algorithm of ours. They register here so that they report like
// the algorithms do: on device memory, the front doors of a
// chorus::nccl::communicator return algorithm::nccl and log "nccl (backend)".
struct backend_entry {
  std::string_view name;
  algorithm id;
  std::string_view cost;
  std::string_view when;
};

inline constexpr std::array<backend_entry, 1> backends{{
    {"nccl", algorithm::nccl, "NCCL's own (ring, tree, NVLS, CollNet, chosen by NCCL's tuning model)",
     "buffers NCCL moves (device memory) on a chorus::nccl::communicator"},
}};

// A backend's choice: its own. Forcing one of chorus's algorithms on it is
// an error that says so, not a silent fallback.
inline choice choose_backend(std::string_view backend, std::string_view collective, algorithm forced) {
  for (const backend_entry& entry : backends) {
    if (entry.name != backend) continue;
    if (forced != algorithm::automatic && forced != entry.id)
      throw error(errc::invalid_argument, std::string(collective) + " on a " + std::string(backend) +
                                              " communicator runs " + std::string(backend) + "'s own algorithms; " +
                                              std::string(to_string(forced)) +
                                              " is one of chorus's (for UCX communicators)");
    return {entry.id, "backend"};
  }
  throw error(errc::invalid_argument, "'" + std::string(backend) + "' is not a registered backend");
}

// The CHORUS_DEBUG=1 line about one call's choice.
template <class Communicator>
void report(const Communicator& comm, std::string_view collective, std::size_t bytes, dtype type, const choice& made) {
  if (!log::debug_enabled()) return;
  log::debug(comm.transport().rank(), std::string(collective) + " of " + std::to_string(bytes) + " B " +
                                          std::string(to_string(type)) + " over " + std::to_string(comm.size()) +
                                          " ranks: " + std::string(to_string(made.chosen)) + " (" + made.reason + ")");
}

// ... and about the choice between hosts inside a hierarchical collective.
template <class Communicator>
void report_between_hosts(const Communicator& comm, std::string_view collective, std::size_t bytes, int ranks,
                          const choice& made) {
  if (!log::debug_enabled()) return;
  log::debug(comm.transport().rank(), std::string(collective) + " between hosts of " + std::to_string(bytes) +
                                          " B over " + std::to_string(ranks) +
                                          " ranks: " + std::string(to_string(made.chosen)) + " (" + made.reason + ")");
}

}  // namespace chorus
