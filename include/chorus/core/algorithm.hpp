// Names of the collective algorithms, for forcing one (chorus::algo::ring),
// for CHORUS_TUNE and CHORUS_ALLREDUCE_ALGO, and for reporting which one
// ran; and which collective offers which.
#pragma once

#include <chorus/core/error.hpp>

#include <array>
#include <optional>
#include <string>
#include <string_view>

namespace chorus {

enum class algorithm {
  automatic,           // let the decision table choose
  ring,                // allreduce, allgather, reduce_scatter
  recursive_doubling,  // allreduce, allgather
  rabenseifner,        // allreduce
  tree,                // allreduce, broadcast, reduce (binomial)
  recursive_halving,   // reduce_scatter
  chain,               // broadcast (pipelined)
  encode_once,         // compressed allreduce: each contribution encoded once
  pairwise,            // alltoall
  nccl,                // every collective on a chorus::nccl::communicator: NCCL's own
  sparse,              // compressed allreduce of a sparse codec (top-k, random-k)
  shared_memory,       // allreduce, allgather, reduce_scatter, broadcast: every rank on one host
  hierarchical,        // allreduce, allgather, reduce_scatter, broadcast: hosts holding equal numbers of ranks
};

namespace algo {
inline constexpr algorithm automatic = algorithm::automatic;
inline constexpr algorithm ring = algorithm::ring;
inline constexpr algorithm recursive_doubling = algorithm::recursive_doubling;
inline constexpr algorithm rd = algorithm::recursive_doubling;
inline constexpr algorithm rabenseifner = algorithm::rabenseifner;
inline constexpr algorithm tree = algorithm::tree;
inline constexpr algorithm recursive_halving = algorithm::recursive_halving;
inline constexpr algorithm chain = algorithm::chain;
inline constexpr algorithm encode_once = algorithm::encode_once;
inline constexpr algorithm pairwise = algorithm::pairwise;
inline constexpr algorithm nccl = algorithm::nccl;
inline constexpr algorithm sparse = algorithm::sparse;
inline constexpr algorithm shared_memory = algorithm::shared_memory;
inline constexpr algorithm shm = algorithm::shared_memory;
inline constexpr algorithm hierarchical = algorithm::hierarchical;
}  // namespace algo

inline constexpr std::array<std::pair<algorithm, std::string_view>, 16> algorithm_names{{
    {algorithm::automatic, "auto"},
    {algorithm::ring, "ring"},
    {algorithm::recursive_doubling, "recursive_doubling"},
    {algorithm::recursive_doubling, "rd"},
    {algorithm::rabenseifner, "rabenseifner"},
    {algorithm::tree, "tree"},
    {algorithm::recursive_halving, "recursive_halving"},
    {algorithm::chain, "chain"},
    {algorithm::encode_once, "encode_once"},
    {algorithm::encode_once, "once"},
    {algorithm::pairwise, "pairwise"},
    {algorithm::nccl, "nccl"},
    {algorithm::sparse, "sparse"},
    {algorithm::shared_memory, "shared_memory"},
    {algorithm::shared_memory, "shm"},
    {algorithm::hierarchical, "hierarchical"},
}};

constexpr std::string_view to_string(algorithm choice) noexcept {
  for (const auto& [value, name] : algorithm_names)
    if (value == choice) return name;
  return "unknown";
}

// Which algorithms each collective offers, for checking a forced choice or
// a tuning rule (the registry, collective/selection.hpp, adds each one's
// cost, when it is chosen, and the measured table).
struct collective_algorithms {
  std::string_view collective;
  std::array<algorithm, 6> offered;  // `automatic` marks an unused slot

  constexpr bool offers(algorithm choice) const noexcept {
    for (std::size_t i = 0; i < offered.size(); ++i)
      if (offered[i] != algorithm::automatic && offered[i] == choice) return true;
    return false;
  }
  std::string list() const {
    std::string text;
    for (std::size_t i = 0; i < offered.size(); ++i)
      if (offered[i] != algorithm::automatic) text += (text.empty() ? "" : ", ") + std::string(to_string(offered[i]));
    return text;
  }
};

inline constexpr std::array<collective_algorithms, 7> collectives{{
    {"allreduce",
     {algorithm::ring, algorithm::recursive_doubling, algorithm::rabenseifner, algorithm::tree,
      algorithm::shared_memory, algorithm::hierarchical}},
    {"allgather", {algorithm::ring, algorithm::recursive_doubling, algorithm::shared_memory, algorithm::hierarchical}},
    {"reduce_scatter",
     {algorithm::ring, algorithm::recursive_halving, algorithm::shared_memory, algorithm::hierarchical}},
    {"broadcast", {algorithm::tree, algorithm::chain, algorithm::shared_memory, algorithm::hierarchical}},
    {"compressed_allreduce", {algorithm::ring, algorithm::encode_once, algorithm::sparse}},
    {"reduce", {algorithm::tree}},
    {"alltoall", {algorithm::pairwise}},
}};

// The collective called `name`, or nullptr.
constexpr const collective_algorithms* find_collective(std::string_view name) noexcept {
  for (const collective_algorithms& c : collectives)
    if (c.collective == name) return &c;
  return nullptr;
}

// Throws unless `collective` offers `chosen`; `source` says who chose it.
inline algorithm require_offered(std::string_view collective, algorithm chosen, std::string_view source) {
  const collective_algorithms* known = find_collective(collective);
  if (known != nullptr && known->offers(chosen)) return chosen;
  throw error(errc::invalid_argument, std::string(source) + " names " + std::string(to_string(chosen)) +
                                          ", which is not an algorithm of " + std::string(collective) +
                                          (known ? " (it has " + known->list() + ")" : ""));
}

inline algorithm require_allreduce_algorithm(algorithm chosen, std::string_view source) {
  return require_offered("allreduce", chosen, source);
}

inline algorithm parse_algorithm(std::string_view text, std::string_view source) {
  for (const auto& [value, name] : algorithm_names)
    if (name == text) return value;
  throw error(errc::invalid_argument,
              std::string(source) + "='" + std::string(text) +
                  "' is not an algorithm (auto, ring, rd, recursive_doubling, rabenseifner, tree, "
                  "recursive_halving, chain, once, encode_once, pairwise, sparse, shared_memory, shm, hierarchical)");
}

}  // namespace chorus
