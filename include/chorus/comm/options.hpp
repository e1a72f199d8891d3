// Communicator settings: code first, then CHORUS_* environment variables,
// then defaults. A field set in `options` wins over the environment.
//
//   timeout   CHORUS_TIMEOUT   (30, 30s, 500ms, 2m)       default 180 s
//   progress  CHORUS_PROGRESS  (spin|yield|block|auto)    default auto:
//             block when this node runs more ranks than the process may use
//             cores, spin otherwise.
//   check     CHORUS_CHECK     (0|1): agree on every collective's arguments
//             first (one small allgather)  default 1, 0 with NDEBUG
//   tune      CHORUS_TUNE      rules that override the algorithm tables
//             (core/tuning.hpp), parsed once here
//   joiners   CHORUS_JOINERS   processes that may join while the job runs
//             (a peer slot each on every rank)          default 16
//   connect   CHORUS_CONNECT   (lazy|eager): endpoints on first use, or to
//             every rank at start-up                    default lazy
//   record    CHORUS_RECORD    flight-record entries per communicator
//             (record/journal.hpp); 0 records nothing    default 2048
//   CHORUS_ALLREDUCE_ALGO is parsed here too, once, for the collectives
//   (see collective/machinery/selection.hpp); every other CHORUS_* variable is
//   checked here (core/variables.hpp), so a bad one fails init().
#pragma once

#include <chorus/core/env.hpp>
#include <chorus/core/tuning.hpp>
#include <chorus/core/variables.hpp>
#include <chorus/record/journal.hpp>
#include <chorus/transport/transport.hpp>

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <optional>
#include <string>
#include <thread>

namespace chorus {

inline constexpr std::chrono::milliseconds default_timeout{180000};

struct options {
  std::optional<std::chrono::milliseconds> timeout;
  std::optional<transport::progress_mode> progress;
  std::optional<bool> check;
  std::optional<std::string> tune;  // CHORUS_TUNE's form
  // Ranks per host (CHORUS_LOCAL_SIZE's role): the ranks that share a
  // machine form hosts of this many, in rank order, for shared-memory and
  // hierarchical collectives; run_threads uses it to simulate hosts.
  std::optional<int> local_size;
  std::optional<int> joiners;         // CHORUS_JOINERS's role
  std::optional<std::size_t> record;  // CHORUS_RECORD's role
  std::optional<bool> eager_connect;  // CHORUS_CONNECT=eager's role
};

struct settings {
  std::chrono::milliseconds timeout = default_timeout;
  transport::progress_mode progress = transport::progress_mode::spin;
  std::string progress_reason;  // why this mode, for the debug log
  bool check = true;
  algorithm allreduce_algorithm = algorithm::automatic;  // CHORUS_ALLREDUCE_ALGO
  tuning tune;                                           // CHORUS_TUNE
  int ranks_per_host = 1 << 20;                          // see options::local_size
  int joiners = 16;                                      // see options::joiners
  bool eager_connect = false;                            // see options::eager_connect
  record::journal_settings record;                       // CHORUS_RECORD, CHORUS_RECORD_DIR
};

inline bool check_by_default() {
#ifdef NDEBUG
  return false;
#else
  return true;
#endif
}

// Cores this process may run on (its affinity mask, which respects cpusets).
inline int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

inline settings resolve(const options& given, int local_ranks) {
  variables::check_variables();
  settings chosen;
  chosen.timeout = given.timeout.value_or(env::get_duration("CHORUS_TIMEOUT").value_or(default_timeout));
  // Read once here: the collectives consult these on every call.
  chosen.allreduce_algorithm = variables::allreduce_algorithm();
  chosen.tune = given.tune ? parse_tuning(*given.tune, "options.tune") : tuning_from_environment();
  chosen.ranks_per_host = given.local_size.value_or(local_ranks);
  if (chosen.ranks_per_host < 1) throw error(errc::invalid_argument, "options.local_size must be at least 1");
  chosen.joiners = given.joiners.value_or(static_cast<int>(env::get_integer("CHORUS_JOINERS", 0, 65536).value_or(16)));
  if (chosen.joiners < 0) throw error(errc::invalid_argument, "options.joiners must not be negative");
  chosen.eager_connect =
      given.eager_connect.value_or(env::get_choice("CHORUS_CONNECT", variables::connect_choices).value_or(0) == 1);
  chosen.record = record::journal_settings::from_environment();
  if (given.record) chosen.record.entries = *given.record;
  chosen.check = given.check.value_or(env::get_integer("CHORUS_CHECK", 0, 1).value_or(check_by_default() ? 1 : 0) == 1);
  using transport::progress_mode;
  if (given.progress) {
    chosen.progress = *given.progress;
    chosen.progress_reason = "set in code";
    return chosen;
  }
  const auto from_env = env::get_choice("CHORUS_PROGRESS", variables::progress_choices);
  if (from_env && *from_env < 3) {
    chosen.progress = static_cast<progress_mode>(*from_env);
    chosen.progress_reason = "CHORUS_PROGRESS";
    return chosen;
  }
  const int cores = usable_cores();
  chosen.progress = local_ranks > cores ? progress_mode::block : progress_mode::spin;
  chosen.progress_reason = std::to_string(local_ranks) + " local ranks, " + std::to_string(cores) + " cores";
  return chosen;
}

}  // namespace chorus
