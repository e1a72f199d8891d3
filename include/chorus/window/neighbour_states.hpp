// neighbour_states: what a window keeps per neighbour (a source's state in
// the reader, a target's in the writer) found by its rank, and visited
// with the weights an operation gives them: an unknown rank is an
// invalid_argument error naming the operation, a lost one is skipped or a
// peer failure under the window's drop policy (neighbour_links.hpp).
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/window/neighbour_links.hpp>

#include <string>
#include <vector>

namespace chorus {

// A neighbour and the weight an operation gives it.
struct neighbour_weight {
  int rank = -1;
  double weight = 1.0;
};

}  // namespace chorus

namespace chorus::windows {

// A window's error, from this rank (world ranks in the context).
template <class Communicator>
error window_error(const Communicator& comm, errc code, const std::string& what, int peer,
                   const std::string& operation) {
  return error(code, what, {comm.world_rank(comm.rank()), peer < 0 ? -1 : comm.world_rank(peer), operation});
}

template <class States>
std::vector<int> ranks_of(const States& states) {
  std::vector<int> ranks;
  for (const auto& state : states) ranks.push_back(state.rank);
  return ranks;
}

// The weight `weights` gives `rank`: 0 when it is not named.
inline double weight_of(const std::vector<neighbour_weight>& weights, int rank) {
  for (const neighbour_weight& entry : weights)
    if (entry.rank == rank) return entry.weight;
  return 0.0;
}

// The state of `rank`; `what` says what the operation wanted it to be ("a
// source").
template <class Communicator, class States>
auto& named(const Communicator& comm, States& states, int rank, const char* what, const char* operation) {
  for (auto& state : states)
    if (state.rank == rank) return state;
  throw window_error(comm, errc::invalid_argument, "rank " + std::to_string(rank) + " is not " + what + " of this rank",
                     -1, std::string("window ") + operation);
}

// f(state, weight) for each state named in `weights`, or every live one
// with weight 1 when it is empty. Naming a lost neighbour is a peer
// failure unless the window drops dead ones.
template <class Communicator, class States, class F>
void for_each_weighted(neighbour_links<Communicator>& links, const Communicator& comm, States& states,
                       const std::vector<neighbour_weight>& weights, const char* what, const char* operation, F&& f) {
  if (weights.empty()) return links.each_live(states, [&](auto& state) { f(state, 1.0); });
  for (const neighbour_weight& entry : weights) {
    auto& state = named(comm, states, entry.rank, what, operation);
    if (links.lost(state.rank) && !links.drops_dead()) links.fail_gone(state.rank, std::string("window ") + operation);
    if (!links.lost(state.rank)) links.guarded([&] { f(state, entry.weight); });
  }
}

}  // namespace chorus::windows
