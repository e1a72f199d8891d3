// Every CHORUS_* variable chorus reads at run time, in one table: its name
// and how its value is checked. init() checks them all (check_variables), so
// a bad value fails at start-up rather than at the first collective that
// would have read it, and a misspelt name (CHORUS_TIMOUT) is an error naming
// the variable it resembles rather than a setting silently ignored. Names
// that resemble no chorus variable are left alone (other tools may use the
// prefix; chorus's own scripts read CHORUS_BUILD_DIR, for one).
#pragma once

#include <chorus/core/algorithm.hpp>
#include <chorus/core/env.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/machine.hpp>
#include <chorus/core/tuning.hpp>

#include <unistd.h>  // environ

#include <algorithm>
#include <array>
#include <climits>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::variables {

inline constexpr std::array<std::string_view, 4> progress_choices{"spin", "yield", "block", "auto"};
inline constexpr std::array<std::string_view, 2> codec_simd_choices{"auto", "portable"};
inline constexpr std::array<std::string_view, 3> cuda_path_choices{"auto", "staged", "direct"};
inline constexpr std::array<std::string_view, 2> window_network_choices{"messages", "rma"};
inline constexpr std::array<std::string_view, 3> streaming_store_choices{"auto", "always", "never"};
inline constexpr std::array<std::string_view, 2> connect_choices{"lazy", "eager"};

// CHORUS_ALLREDUCE_ALGO: automatic when unset or "auto". Whether allreduce
// offers the name is checked by allreduce's list when it chooses.
inline algorithm allreduce_algorithm() {
  const auto text = env::get("CHORUS_ALLREDUCE_ALGO");
  return text ? parse_algorithm(*text, "CHORUS_ALLREDUCE_ALGO") : algorithm::automatic;
}

// CHORUS_WINDOW_NETWORK: whether windows reach neighbours on other hosts by
// UCX RMA rather than chorus messages (window/relay.hpp says why not).
inline bool window_rma() { return env::get_choice("CHORUS_WINDOW_NETWORK", window_network_choices).value_or(0) == 1; }

struct variable {
  std::string_view name;
  void (*check)();  // throws invalid_argument for a value that does not parse
  std::string_view meaning;
  std::string_view default_value;  // the docs' table (tools/doc_tables: variables) is made from these
};

inline void any_value() {}

// The launcher's variables (rank, size, address) are parsed by bootstrap's
// discover(), which init() also runs; here they only count as known names.
inline constexpr std::array<variable, 26> catalogue{{
    {"CHORUS_BOOTSTRAP", any_value,
     "where rank, size and the peers' addresses come from: `pmix` (the launcher's PMIx server: `srun --mpi=pmix`, "
     "`mpirun`), `store` (the variables below and the rendezvous store), `auto`; `torch` is the torch backend's",
     "`auto`: PMIx under a PMIx server unless `CHORUS_RANK` is set, else the store"},
    {"CHORUS_RANK", any_value, "this rank", "from MPI/PMI/Slurm, else 0"},
    {"CHORUS_SIZE", any_value, "the job size", "from MPI/PMI/Slurm, else 1"},
    {"CHORUS_LOCAL_RANK", [] { env::get_integer("CHORUS_LOCAL_RANK", 0, INT_MAX); },
     "this rank's index on its node (set by chorus-run; informational)", "unset"},
    {"CHORUS_LOCAL_SIZE", any_value,
     "ranks on this node (also `OMPI_COMM_WORLD_LOCAL_SIZE`, `MPI_LOCALNRANKS`, `SLURM_NTASKS_PER_NODE`); the ranks "
     "that share a machine (same kernel and network namespace) form hosts of this many, in rank order, for the "
     "shared-memory and hierarchical collectives (`options::local_size` in code)",
     "job size"},
    {"CHORUS_ADDR", any_value, "rendezvous store `host:port` (`[v6]:port` works)", "required when size > 1"},
    {"CHORUS_TOKEN", any_value, "shared secret a store client must present", "empty"},
    {"CHORUS_LAUNCHER", any_value, "set by chorus-run: the launcher hosts the store, not rank 0", "unset"},
    {"CHORUS_JOIN", [] { env::get_integer("CHORUS_JOIN", 0, 1); },
     "`1`: this process joins a running job (docs/averaging.md, workers that join) of `CHORUS_SIZE` ranks through "
     "the store at `CHORUS_ADDR`; it takes the next free rank; no `CHORUS_RANK`",
     "unset"},
    {"CHORUS_JOINERS", [] { env::get_integer("CHORUS_JOINERS", 0, 65536); },
     "how many processes may join the job while it runs (each rank keeps a slot for each)", "`16`"},
    {"CHORUS_CONNECT", [] { env::get_choice("CHORUS_CONNECT", connect_choices); },
     "when endpoints are made: `lazy`, on a peer's first send or receive (a ring holds 2, a tree O(log n)); "
     "`eager`, to every rank at start-up (the first call pays nothing, each rank holds n)",
     "`lazy`"},
    {"CHORUS_TIMEOUT", [] { env::get_duration("CHORUS_TIMEOUT"); }, "bound on every wait: `30`, `30s`, `500ms`, `2m`",
     "`180s`"},
    {"CHORUS_PROGRESS", [] { env::get_choice("CHORUS_PROGRESS", progress_choices); },
     "how waits progress: `spin`, `yield`, `block` (yield for 200 us, then sleep on the UCX worker's event fd), `auto`",
     "`auto`: `block` when local ranks outnumber usable cores, else `spin` (which yields while the progress thread "
     "waits)"},
    {"CHORUS_DEBUG", [] { env::get_integer("CHORUS_DEBUG", 0, 1); },
     "`1`: log choices (progress mode, store host, each collective's algorithm and the rule or cost that chose it) on "
     "stderr",
     "`0`"},
    {"CHORUS_CHECK", [] { env::get_integer("CHORUS_CHECK", 0, 1); },
     "`1`: check that all ranks agree on each collective's arguments", "`0` (`1` without `NDEBUG`)"},
    {"CHORUS_RECORD", [] { env::get_integer("CHORUS_RECORD", 0, 1 << 24); },
     "flight-record entries kept per communicator (rounded up to a power of two); `0` records nothing", "`2048`"},
    {"CHORUS_RECORD_DIR", any_value,
     "where each rank writes its flight record (`rank-N.json`): on an error raised to the caller, on `SIGUSR1` and "
     "`SIGTERM`, at exit",
     "unset (chorus-run sets one per job; `SIGUSR1` writes to `$TMPDIR/chorus-record-JOB`)"},
    {"CHORUS_TRACE", any_value,
     "write a timeline of the calls and their algorithms' phases (Chrome trace events) at exit: `FILE` for one rank, "
     "else `FILE`'s stem`.rank-N` and extension beside it, which chorus-run merges into `FILE`",
     "unset: no timeline"},
    {"CHORUS_ALLREDUCE_ALGO", [] { allreduce_algorithm(); },
     "force the allreduce algorithm: `ring`, `rd`, `rabenseifner`, `tree`, `shm`, `hierarchical`, `auto` (a caller's "
     "explicit choice and `CHORUS_TUNE` still win; a name allreduce lacks fails its first call)",
     "`auto`"},
    {"CHORUS_TUNE", [] { tuning_from_environment(); },
     "rules that override the defaults: `collective[@ranks]:low-high:algorithm,...;...` (collectives.md)", "none"},
    {"CHORUS_MACHINE", [] { calibrated_machine(); },
     "a machine file (`chorus-perf calibrate` writes one): the cost model prices every algorithm with its measured "
     "latencies, bandwidths and reduction cost, in place of the defaults' rules (collectives.md, \"A machine's own "
     "figures\")",
     "unset: the defaults' rules, then the cost model with rough constants"},
    {"CHORUS_CODEC_SIMD", [] { env::get_choice("CHORUS_CODEC_SIMD", codec_simd_choices); },
     "`portable`: codecs use their portable loops even where AVX2/F16C exist (same bits)", "`auto`"},
    {"CHORUS_STREAMING_STORES", [] { env::get_choice("CHORUS_STREAMING_STORES", streaming_store_choices); },
     "`always`: out-of-place shared-memory allreduces write their output with streaming stores at every size; "
     "`never`: at none",
     "`auto`: where the output and input of the host's ranks fill the last-level cache"},
    {"CHORUS_FUSION_BUCKET", [] { env::get_size("CHORUS_FUSION_BUCKET"); },
     "bucket size of `fused_allreduce`: bytes, or with `K`/`M`/`G`", "`25M`"},
    {"CHORUS_CUDA_PATH", [] { env::get_choice("CHORUS_CUDA_PATH", cuda_path_choices); },
     "how device buffers move: `staged` (through pinned host memory), `direct` (device pointers to UCX, reductions and "
     "codecs on the device; an error where UCX cannot move CUDA memory or no device kernels were given), `auto`",
     "`auto`: direct where both hold, else staged"},
    {"CHORUS_WINDOW_NETWORK", [] { window_rma(); },
     "how a window reaches a neighbour on another host: `messages` (chorus messages its progress thread applies; a "
     "dead neighbour is a peer failure), `rma` (UCX RMA: for hardware RMA, InfiniBand or RoCE; over TCP UCX aborts "
     "the process when a neighbour dies)",
     "`messages`"},
}};

// Levenshtein distance, for "did you mean".
inline std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// The known name a misspelt one most resembles (at most two edits away).
inline std::string_view resembles(std::string_view name) {
  std::string_view closest;
  std::size_t best = 3;
  for (const variable& known : catalogue) {
    const std::size_t distance = edit_distance(name, known.name);
    if (distance < best) {
      best = distance;
      closest = known.name;
    }
  }
  return closest;
}

inline void check_variables() {
  for (const variable& known : catalogue) known.check();
  for (char** entry = environ; entry != nullptr && *entry != nullptr; ++entry) {
    const std::string_view text(*entry);
    const std::string_view name = text.substr(0, text.find('='));
    if (!name.starts_with("CHORUS_")) continue;
    if (std::any_of(catalogue.begin(), catalogue.end(), [&](const variable& known) { return known.name == name; }))
      continue;
    if (const std::string_view meant = resembles(name); !meant.empty())
      throw error(errc::invalid_argument, std::string(name) + " is not a chorus variable; did you mean " +
                                              std::string(meant) + "? (the README's Configuration table lists them)");
  }
}

}  // namespace chorus::variables
