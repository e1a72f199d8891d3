// Helpers shared by the multi-rank tests.
#pragma once

#include <chorus/chorus.hpp>

#include <chrono>
#include <cstdint>
#include <vector>

namespace chorus_test {

// Communicator options for multi-rank tests: a timeout short enough that a
// hang fails the test in time, long enough for the sanitizer builds.
inline chorus::options quick(std::chrono::milliseconds timeout = std::chrono::milliseconds(60000)) {
  chorus::options options;
  options.timeout = timeout;
  return options;
}

// A value that depends on sender, receiver, message and position, so a
// message delivered to the wrong receiver or in the wrong slot is caught.
inline std::uint32_t pattern(int from, int to, int message, std::size_t index) {
  return static_cast<std::uint32_t>(from * 1000003 + to * 10007 + message * 101) ^
         static_cast<std::uint32_t>(index * 2654435761u);
}

inline std::vector<std::uint32_t> patterned(int from, int to, int message, std::size_t count) {
  std::vector<std::uint32_t> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = pattern(from, to, message, i);
  return values;
}

inline std::size_t count_wrong(const std::vector<std::uint32_t>& values, int from, int to, int message) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < values.size(); ++i) wrong += values[i] != pattern(from, to, message, i);
  return wrong;
}

// Element counts that do not divide evenly, including 0 and 1, and one
// message large enough for the rendezvous protocol.
inline const std::vector<std::size_t> odd_counts = {0, 1, 7, 4099, (1u << 18) + 3};

// Exchanges one message of each count between every ordered pair (self
// included) and returns the number of wrong elements received.
inline std::size_t all_pairs_exchange(chorus::communicator& comm) {
  std::size_t wrong = 0;
  const int n = comm.size();
  for (std::size_t m = 0; m < odd_counts.size(); ++m) {
    const int message = static_cast<int>(m);
    std::vector<std::vector<std::uint32_t>> outgoing, incoming;
    std::vector<chorus::communicator::request> requests;
    for (int peer = 0; peer < n; ++peer) {
      outgoing.push_back(patterned(comm.rank(), peer, message, odd_counts[m]));
      incoming.emplace_back(odd_counts[m], 0xdeadbeefu);
    }
    for (int peer = 0; peer < n; ++peer)
      requests.push_back(comm.irecv(std::span(incoming[static_cast<std::size_t>(peer)]), peer, message));
    for (int peer = 0; peer < n; ++peer)
      requests.push_back(
          comm.isend(std::span<const std::uint32_t>(outgoing[static_cast<std::size_t>(peer)]), peer, message));
    comm.wait_all(requests);
    for (int peer = 0; peer < n; ++peer) {
      if (requests[static_cast<std::size_t>(peer)].received_bytes() != odd_counts[m] * 4) ++wrong;
      wrong += count_wrong(incoming[static_cast<std::size_t>(peer)], peer, comm.rank(), message);
    }
  }
  return wrong;
}

}  // namespace chorus_test
