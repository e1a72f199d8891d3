// How a collective chooses among the algorithms of its list
// (collective/machinery/algorithm_list.hpp), in this order:
//   1. the caller's argument (chorus::algo::ring), checked against the list;
//   2. CHORUS_TUNE (core/tuning.hpp): rules by collective, ranks and size;
//   3. CHORUS_ALLREDUCE_ALGO, for allreduce (the older, one-word override);
//   4. the collective's defaults: rules in the same grammar, measured by
//      bench/sweep, each taken only where its algorithm suits the call
//      (shared memory on one host, the hierarchical form on several);
//   5. where no default matches, the cost model: the algorithm whose
//      formula (its `seconds`) is least for this call, priced with the
//      machine's constants (core/machine.hpp), after a program's tuner
//      (install_cost_tuner) has edited the table, as NCCL's tuner plugin
//      edits NCCL's.
// A calibrated machine (CHORUS_MACHINE) or an installed tuner passes over
// step 4: the defaults' rules were measured on another machine.
// Every call says what ran and why: the collective returns the algorithm,
// chorus::choose() predicts it with its reason ("caller", the rule's text,
// "CHORUS_ALLREDUCE_ALGO", "cost model ..."), and CHORUS_DEBUG=1 logs a
// line per call, and the flight recorder keeps it with the call
// (record/call.hpp). Backends (NCCL) register below so that they report alike.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/core/algorithm.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/log.hpp>
#include <chorus/core/tuning.hpp>
#include <chorus/core/variables.hpp>
#include <chorus/record/call.hpp>

#include <array>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>

namespace chorus {

// A collective's list and defaults as the registry holds them.
struct collective_entry {
  std::string_view name;
  std::span<const algorithm_facts> algorithms;
  tuning default_rules;  // the list's defaults (CHORUS_TUNE grammar), parsed

  // The algorithm `named` (by its name or an alias), or nullptr.
  const algorithm_facts* find(const algorithm& named) const noexcept {
    for (const algorithm_facts& row : algorithms)
      if (row.answers_to(named)) return &row;
    return nullptr;
  }
  std::string list() const {
    std::string text;
    for (const algorithm_facts& row : algorithms) text += (text.empty() ? "" : ", ") + std::string(row.id.name());
    return text;
  }
  // The row of `named`; else an error that says who named it and what the list has.
  const algorithm_facts& offered(const algorithm& named, std::string_view source) const {
    if (const algorithm_facts* row = find(named)) return *row;
    throw error(errc::invalid_argument, std::string(source) + " names " + std::string(named.name()) +
                                            ", which is not an algorithm of " + std::string(name) + " (it has " +
                                            list() + ")");
  }
};

// The registry's entry of a collective whose list type `Algorithms` names
// the collective and its defaults: built (and the defaults parsed) once.
template <class Algorithms>
const collective_entry& entry_of() {
  static constexpr auto defaults = parse_tuning_at_compile_time<Algorithms::defaults>();
  static const collective_entry entry{Algorithms::collective, Algorithms::facts, tuning_of(defaults, "default")};
  return entry;
}

// What runs and why.
struct choice {
  algorithm chosen = algorithm::automatic;
  std::string reason;
  bool moves_host_memory = false;          // the chosen algorithm's: device buffers are staged for it
  const algorithm_facts* facts = nullptr;  // its registry row (null for a backend)
};

// A row of the cost table a tuner edits: an algorithm that may run the
// call, and what the model says it costs. A tuner may change `seconds`
// (infinity or NaN takes the algorithm out); the least wins.
struct algorithm_cost {
  algorithm id;
  double seconds = 0;
};
using cost_tuner = std::function<void(std::string_view collective, const workload&, std::span<algorithm_cost>)>;

namespace detail {

struct installed_tuner {
  std::atomic<bool> any{false};  // every choice asks: no lock while none is installed
  std::mutex lock;
  std::shared_ptr<const cost_tuner> tuner;
};
inline installed_tuner& tuner_slot() {
  static installed_tuner slot;
  return slot;
}
inline std::shared_ptr<const cost_tuner> current_tuner() {
  installed_tuner& slot = tuner_slot();
  if (!slot.any.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard guard(slot.lock);
  return slot.tuner;
}

}  // namespace detail

// Installs `tuner` for every choice the process makes from now on (an
// empty one: none); returns the one it replaces. It runs on the calling
// rank's thread, with the candidates of one call, and must give every rank
// the same answer for the same call.
inline cost_tuner install_cost_tuner(cost_tuner tuner) {
  detail::installed_tuner& slot = detail::tuner_slot();
  std::shared_ptr<const cost_tuner> given = tuner ? std::make_shared<const cost_tuner>(std::move(tuner)) : nullptr;
  std::lock_guard guard(slot.lock);
  std::swap(slot.tuner, given);
  slot.any.store(slot.tuner != nullptr, std::memory_order_release);
  return given ? *given : cost_tuner{};
}

namespace detail {

// The least of the candidates' costs on the call's path, after the tuner.
inline choice by_cost_model(const collective_entry& entry, const workload& work, const machine_model& model,
                            const cost_tuner* tuner, bool calibrated) {
  const machine constants = model.on_path(work.hosts > 1 || work.between_hosts);
  std::array<algorithm_cost, 32> table;
  std::array<const algorithm_facts*, 32> rows{};
  std::size_t candidates = 0;
  for (const algorithm_facts& row : entry.algorithms) {
    if (!row.chosen_by_default_for(work) || candidates == table.size()) continue;
    rows[candidates] = &row;
    table[candidates++] = {row.id, row.seconds(work, constants)};
  }
  if (tuner != nullptr && candidates > 0) (*tuner)(entry.name, work, std::span(table.data(), candidates));
  const algorithm_facts* best = nullptr;
  double least = 0;
  for (std::size_t k = 0; k < candidates; ++k)
    if (std::isfinite(table[k].seconds) && (best == nullptr || table[k].seconds < least))
      best = rows[k], least = table[k].seconds;
  if (best == nullptr)
    throw error(errc::invalid_argument, std::string(entry.name) + " has no algorithm for " +
                                            std::to_string(work.ranks) + " ranks here (it has " + entry.list() +
                                            (candidates > 0 ? "; the cost tuner took out every one" : "") + ")");
  char modelled[32];
  std::snprintf(modelled, sizeof modelled, "%.3g", least * 1e6);
  const std::string how = std::string(calibrated ? " (CHORUS_MACHINE" : "") +
                          (tuner != nullptr ? (calibrated ? ", tuned" : " (tuned") : "") +
                          (calibrated || tuner != nullptr ? ")" : "");
  return {best->id, std::string("cost model") + how + ", " + std::string(modelled) + " us", best->moves_host_memory,
          best};
}

}  // namespace detail

// Between hosts (inside a hierarchical collective) a rule or setting that
// names an algorithm which cannot run there (shared memory, hierarchical) is
// passed over: it was written for the whole call. Every rule for this
// collective is checked against its list, matching or not, so that a bad
// name fails the first call on every rank alike.
inline choice choose(const collective_entry& entry, const workload& work, algorithm forced, const tuning& rules,
                     algorithm configured_allreduce) {
  const auto made = [&](const algorithm_facts& row, std::string reason) {
    return choice{row.id, std::move(reason), row.moves_host_memory, &row};
  };
  if (!forced.is_automatic()) return made(entry.offered(forced, "the caller"), "caller");
  for (const tuning_rule& rule : rules.rules)
    if (rule.collective == entry.name) (void)entry.offered(rule.chosen, rule.text);
  // match() stops at the first rule its predicate takes, so `row` is then
  // that rule's algorithm, looked up once.
  const algorithm_facts* row = nullptr;
  const auto usable = [&](const algorithm& named) {
    row = &entry.offered(named, "CHORUS_TUNE");
    return !work.between_hosts || row->feasible(work);
  };
  if (const tuning_rule* rule = rules.match(entry.name, work.ranks, work.bytes, usable)) return made(*row, rule->text);
  if (entry.name == "allreduce" && !configured_allreduce.is_automatic()) {
    const algorithm_facts& configured = entry.offered(configured_allreduce, "CHORUS_ALLREDUCE_ALGO");
    if (!work.between_hosts || configured.feasible(work)) return made(configured, "CHORUS_ALLREDUCE_ALGO");
  }
  const machine_model* calibrated = calibrated_machine();
  const std::shared_ptr<const cost_tuner> tuner = detail::current_tuner();
  const auto suits = [&](const algorithm& named) {
    row = &entry.offered(named, "the defaults");
    return row->chosen_by_default_for(work);
  };
  if (calibrated == nullptr && tuner == nullptr)
    if (const tuning_rule* rule = entry.default_rules.match(entry.name, work.ranks, work.bytes, suits))
      return made(*row, rule->text);
  return detail::by_cost_model(entry, work, calibrated != nullptr ? *calibrated : machine_model{}, tuner.get(),
                               calibrated != nullptr);
}

// The choice a communicator makes: its settings hold CHORUS_TUNE and
// CHORUS_ALLREDUCE_ALGO, parsed once at init.
// The communicator adds where its ranks are (host_layout); an algorithm
// that cannot run there (forced, tuned or configured) is an error that
// says why.
template <class Communicator>
choice choose(const Communicator& comm, const collective_entry& entry, workload work, algorithm forced) {
  if constexpr (requires { comm.layout(); }) {
    work.hosts = comm.layout().hosts;
    work.ranks_per_host = comm.layout().ranks_per_host;
  }
  choice made = choose(entry, work, forced, comm.config().tune, comm.config().allreduce_algorithm);
  if (!made.facts->feasible(work)) {
    const std::string here = std::to_string(work.bytes) + " bytes on " + std::to_string(work.hosts) +
                             (work.hosts == 1 ? " host" : " hosts") +
                             (work.ranks_per_host == 0 ? " holding different numbers of ranks" : "");
    throw error(errc::invalid_argument,
                std::string(entry.name) + " with " + std::string(to_string(made.chosen)) + " (" + made.reason +
                    "): it needs " + std::string(made.facts->needs) + ", and this call is " + here,
                {comm.transport().rank(), -1, std::string(entry.name)});
  }
  return made;
}

// The choice inside a hierarchical collective: among `ranks` ranks, one on
// each host, that share a local rank, over the network only. CHORUS_TUNE
// reaches it as it reaches any call of the collective over that many
// ranks, and CHORUS_DEBUG reports it ("between hosts").
template <class Communicator>
choice choose_between_hosts(const Communicator& comm, const collective_entry& entry, int ranks, std::size_t bytes) {
  const workload work{.ranks = ranks, .bytes = bytes, .hosts = ranks, .ranks_per_host = 1, .between_hosts = true};
  return choose(entry, work, algorithm::automatic, comm.config().tune, comm.config().allreduce_algorithm);
}

// A prediction outside any communicator, from the environment as it is now.
inline choice choose(const collective_entry& entry, const workload& work, algorithm forced = algorithm::automatic) {
  return choose(entry, work, forced, tuning_from_environment(), variables::allreduce_algorithm());
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
    if (!forced.is_automatic() && forced != entry.id)
      throw error(errc::invalid_argument, std::string(collective) + " on a " + std::string(backend) +
                                              " communicator runs " + std::string(backend) + "'s own algorithms; " +
                                              std::string(to_string(forced)) +
                                              " is one of chorus's (for UCX communicators)");
    return {entry.id, "backend"};
  }
  throw error(errc::invalid_argument, "'" + std::string(backend) + "' is not a registered backend");
}

// The CHORUS_DEBUG=1 line about one call's choice; `between_hosts`, the
// ranks of the group inside a hierarchical collective that chose.
template <class Communicator>
void report(const Communicator& comm, std::string_view collective, std::size_t bytes, dtype type, const choice& made,
            int between_hosts = 0) {
  record::recorded_call::chose(to_string(made.chosen));
  if (!log::debug_enabled()) return;
  const std::string what = between_hosts > 0
                               ? std::string(collective) + " between hosts of " + std::to_string(bytes) + " B over " +
                                     std::to_string(between_hosts)
                               : std::string(collective) + " of " + std::to_string(bytes) + " B " +
                                     std::string(to_string(type)) + " over " + std::to_string(comm.size());
  log::debug(comm.transport().rank(),
             what + " ranks: " + std::string(to_string(made.chosen)) + " (" + made.reason + ")");
}

}  // namespace chorus
