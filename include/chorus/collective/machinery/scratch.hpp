// Scratch buffers for the algorithms, kept per rank (core/rank_local.hpp:
// the thread's, or a simulated rank's) and reused across calls. Allocating
// (and page-faulting) a fresh buffer of the message size on every call cost
// more than the transfer itself at 32 MiB; a kept buffer is touched once.
// Memory held: per rank and slot, the largest size asked for so far
// (release_scratch() gives it back).
//
// Slot 0 is the algorithm's own scratch; slot 1 holds work copies (float
// working buffers for half/bfloat16, reduce_scatter's input copy); slot 2
// the hierarchical algorithms' packed slices, which outlive the network
// algorithm they call; slot 3 a front door's premultiplied input
// (premultiply.hpp), which outlives the collective it calls. An
// algorithm must not call another that uses the same slot while it holds it.
#pragma once

#include <chorus/core/rank_local.hpp>

#include <array>
#include <cstddef>
#include <span>
#include <vector>

namespace chorus::collective {

namespace detail {
inline std::array<std::vector<std::byte>, 4>& scratch_slots() {
  struct tag;
  return rank_local<std::array<std::vector<std::byte>, 4>, tag>();
}
}  // namespace detail

// `count` elements of uninitialised-in-meaning (old contents) scratch.
template <class A>
std::span<A> scratch(std::size_t count, std::size_t slot = 0) {
  std::vector<std::byte>& storage = detail::scratch_slots()[slot];
  if (storage.size() < count * sizeof(A)) storage.resize(count * sizeof(A));
  return {reinterpret_cast<A*>(storage.data()), count};
}

inline void release_scratch() {
  for (auto& storage : detail::scratch_slots()) std::vector<std::byte>().swap(storage);
}

}  // namespace chorus::collective
