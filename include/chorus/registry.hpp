// Every collective's list by its name, for what asks by name: chorus::choose
// predicting a call ("allreduce", a workload), a rule checked before any
// call, the docs' tables (tools/doc_tables), bench/sweep and the Python
// binding. A front door needs only its own list
// (collective/<collective>/<collective>_algorithms.hpp).
//
//   chorus::choice made = chorus::choose("allreduce", {.ranks = 4, .bytes = 1 << 20});
//   // on one host: shared_memory, "default allreduce@2-:16K-:shared_memory"
#pragma once

#include <chorus/collective/allgather/allgather_algorithms.hpp>
#include <chorus/collective/allreduce/allreduce_algorithms.hpp>
#include <chorus/collective/alltoall/alltoall_algorithms.hpp>
#include <chorus/collective/broadcast/broadcast_algorithms.hpp>
#include <chorus/collective/gather/gather_algorithms.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/collective/reduce/reduce_algorithms.hpp>
#include <chorus/collective/reduce_scatter/reduce_scatter_algorithms.hpp>
#include <chorus/collective/scatter/scatter_algorithms.hpp>
#include <chorus/compressed/compressed_allreduce_algorithms.hpp>
#include <chorus/core/tuning.hpp>

#include <array>
#include <string>
#include <string_view>

namespace chorus {

// In the order of core/tuning.hpp's selecting_collectives.
inline const std::array<const collective_entry*, selecting_collectives.size()>& registry() {
  static const std::array<const collective_entry*, selecting_collectives.size()> entries{
      &entry_of<collective::allreduce_algorithms>(),      &entry_of<collective::allgather_algorithms>(),
      &entry_of<collective::reduce_scatter_algorithms>(), &entry_of<collective::broadcast_algorithms>(),
      &entry_of<compressed::allreduce_algorithms>(),      &entry_of<collective::reduce_algorithms>(),
      &entry_of<collective::alltoall_algorithms>(),       &entry_of<collective::gather_algorithms>(),
      &entry_of<collective::scatter_algorithms>()};
  return entries;
}

inline const collective_entry& registered(std::string_view collective) {
  for (const collective_entry* entry : registry())
    if (entry->name == collective) return *entry;
  throw error(errc::invalid_argument,
              "'" + std::string(collective) + "' is not a collective with a choice of algorithm");
}

// Throws for a rule (or CHORUS_ALLREDUCE_ALGO) that names an algorithm its
// collective does not offer; a collective checks its own rules when it
// chooses, this checks them all at once.
inline void check_names(const tuning& rules, const algorithm& configured_allreduce) {
  for (const tuning_rule& rule : rules.rules) (void)registered(rule.collective).offered(rule.chosen, rule.text);
  if (!configured_allreduce.is_automatic())
    (void)registered("allreduce").offered(configured_allreduce, "CHORUS_ALLREDUCE_ALGO");
}

inline choice choose(std::string_view collective, const workload& work, algorithm forced, const tuning& rules,
                     algorithm configured_allreduce) {
  return choose(registered(collective), work, forced, rules, configured_allreduce);
}

// A prediction outside any communicator, from the environment as it is now.
inline choice choose(std::string_view collective, const workload& work, algorithm forced = algorithm::automatic) {
  return choose(registered(collective), work, forced);
}

inline choice choose_allreduce(int ranks, std::size_t bytes, algorithm forced = algorithm::automatic) {
  return choose("allreduce", {.ranks = ranks, .bytes = bytes}, forced);
}

}  // namespace chorus
