// An algorithm's name: what a caller forces (chorus::algo::ring), what
// CHORUS_TUNE and CHORUS_ALLREDUCE_ALGO name, and what a collective reports
// it ran. A name is a value any header can define (the header that
// implements the algorithm does); which collective offers which algorithm,
// and under which other spellings, is that collective's list
// (collective/machinery/algorithm_list.hpp), not this file.
#pragma once

#include <chorus/core/error.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <string_view>

namespace chorus {

class algorithm {
 public:
  static constexpr std::size_t max_name = 23;

  constexpr algorithm() noexcept = default;  // automatic: let the collective choose
  explicit constexpr algorithm(std::string_view name) {
    if (name.size() > max_name) throw error(errc::invalid_argument, "an algorithm's name has at most 23 characters");
    if (name == "auto") return;
    std::copy(name.begin(), name.end(), text_.begin());
  }

  constexpr std::string_view name() const noexcept {
    const std::string_view spelled(text_.data());
    return spelled.empty() ? std::string_view("auto") : spelled;
  }
  constexpr bool is_automatic() const noexcept { return text_[0] == '\0'; }
  constexpr bool operator==(const algorithm&) const noexcept = default;

  // The algorithms that ship, by their canonical names.
  static const algorithm automatic, ring, recursive_doubling, rabenseifner, tree, recursive_halving, chain, encode_once,
      pairwise, linear, nccl, sparse, shared_memory, shared_memory_small, hierarchical;

 private:
  std::array<char, max_name + 1> text_{};  // NUL-terminated; all NUL: automatic
};

inline constexpr algorithm algorithm::automatic{};
inline constexpr algorithm algorithm::ring{"ring"};                              // allreduce, allgather, reduce_scatter
inline constexpr algorithm algorithm::recursive_doubling{"recursive_doubling"};  // allreduce, allgather
inline constexpr algorithm algorithm::rabenseifner{"rabenseifner"};              // allreduce
inline constexpr algorithm algorithm::tree{"tree"};                              // allreduce, broadcast, reduce
inline constexpr algorithm algorithm::recursive_halving{"recursive_halving"};    // reduce_scatter
inline constexpr algorithm algorithm::chain{"chain"};                            // broadcast (pipelined)
inline constexpr algorithm algorithm::encode_once{"encode_once"};                // compressed allreduce
inline constexpr algorithm algorithm::pairwise{"pairwise"};                      // alltoall
inline constexpr algorithm algorithm::linear{"linear"};                          // gather, scatter
inline constexpr algorithm algorithm::nccl{"nccl"};                              // a chorus::nccl::communicator's own
inline constexpr algorithm algorithm::sparse{"sparse"};                // compressed allreduce, top-k, random-k
inline constexpr algorithm algorithm::shared_memory{"shared_memory"};  // every rank on one host
inline constexpr algorithm algorithm::shared_memory_small{"shared_memory_small"};  // allreduce, small messages
inline constexpr algorithm algorithm::hierarchical{"hierarchical"};  // hosts holding equal numbers of ranks

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
inline constexpr algorithm linear = algorithm::linear;
inline constexpr algorithm nccl = algorithm::nccl;
inline constexpr algorithm sparse = algorithm::sparse;
inline constexpr algorithm shared_memory = algorithm::shared_memory;
inline constexpr algorithm shm = algorithm::shared_memory;
inline constexpr algorithm shared_memory_small = algorithm::shared_memory_small;
inline constexpr algorithm shm_small = algorithm::shared_memory_small;
inline constexpr algorithm hierarchical = algorithm::hierarchical;
}  // namespace algo

constexpr std::string_view to_string(const algorithm& choice) noexcept { return choice.name(); }

// A name as a user spells it ("auto", "rd", "ring"): lower-case letters,
// digits and '_'. Whether a collective offers it (under that name or as an
// alias) is its list's to say, when it chooses.
constexpr bool is_algorithm_name(std::string_view text) noexcept {
  return !text.empty() && text.size() <= algorithm::max_name && std::all_of(text.begin(), text.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

inline algorithm parse_algorithm(std::string_view text, std::string_view source) {
  if (!is_algorithm_name(text))
    throw error(errc::invalid_argument, std::string(source) + "='" + std::string(text) +
                                            "' is not an algorithm's name (lower-case letters, digits and '_', "
                                            "at most 23: ring, rd, rabenseifner, auto, ...)");
  return algorithm(text);
}

}  // namespace chorus
