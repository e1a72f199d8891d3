// The values window tests write (different on every rank, round and
// element, known to every rank), and a ring's sources: shared by the tests
// over UCX (test_window_threads, programs/window_check) and over SimGrid
// (sim_windows).
#pragma once

#include <cmath>
#include <cstddef>
#include <vector>

namespace chorus_test {

inline float value_of(int rank, int round, std::size_t k) {
  return std::sin(0.37f * static_cast<float>(rank + 1) + 0.011f * static_cast<float>(k)) *
             static_cast<float>(1 + rank) +
         0.25f * static_cast<float>(round);
}

inline std::vector<float> values_of(int rank, int round, std::size_t n) {
  std::vector<float> values(n);
  for (std::size_t k = 0; k < n; ++k) values[k] = value_of(rank, round, k);
  return values;
}

// Sources of a ring with both neighbours (distinct ranks).
inline std::vector<int> ring_sources(int rank, int n) {
  std::vector<int> sources;
  for (int peer : {(rank + n - 1) % n, (rank + 1) % n})
    if (peer != rank && (sources.empty() || sources.front() != peer)) sources.push_back(peer);
  return sources;
}

}  // namespace chorus_test
