// Names of the collective algorithms, for forcing one (chorus::algo::ring),
// for CHORUS_ALLREDUCE_ALGO, and for reporting which one ran.
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
}  // namespace algo

inline constexpr std::array<std::pair<algorithm, std::string_view>, 8> algorithm_names{{
    {algorithm::automatic, "auto"},
    {algorithm::ring, "ring"},
    {algorithm::recursive_doubling, "recursive_doubling"},
    {algorithm::recursive_doubling, "rd"},
    {algorithm::rabenseifner, "rabenseifner"},
    {algorithm::tree, "tree"},
    {algorithm::recursive_halving, "recursive_halving"},
    {algorithm::chain, "chain"},
}};

constexpr std::string_view to_string(algorithm choice) noexcept {
  for (const auto& [value, name] : algorithm_names)
    if (value == choice) return name;
  return "unknown";
}

// Throws unless `chosen` is an allreduce algorithm; `source` says who chose it.
inline algorithm require_allreduce_algorithm(algorithm chosen, std::string_view source) {
  if (chosen == algorithm::ring || chosen == algorithm::recursive_doubling || chosen == algorithm::rabenseifner ||
      chosen == algorithm::tree)
    return chosen;
  throw error(errc::invalid_argument,
              std::string(source) + " names " + std::string(to_string(chosen)) +
                  ", which is not an allreduce algorithm (ring, recursive_doubling, rabenseifner, tree)");
}

inline algorithm parse_algorithm(std::string_view text, std::string_view source) {
  for (const auto& [value, name] : algorithm_names)
    if (name == text) return value;
  throw error(errc::invalid_argument,
              std::string(source) + "='" + std::string(text) +
                  "' is not an algorithm (auto, ring, rd, recursive_doubling, rabenseifner, tree, "
                  "recursive_halving, chain)");
}

}  // namespace chorus
