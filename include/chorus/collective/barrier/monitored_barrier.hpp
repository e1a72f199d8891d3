// chorus::monitored_barrier: a barrier that says who did not come, for
// finding the rank a stalled job waits on (torch's monitored_barrier).
//
//   chorus::monitored_barrier(comm, 30s);                    // names the first rank missing
//   chorus::monitored_barrier(comm, 30s, {.wait_all = true});  // names every rank missing
//
// Every rank other than 0 tells rank 0 it arrived and waits for its answer;
// rank 0 waits up to `timeout` for them all (or, without wait_all, until
// the first one fails: a dead rank), then answers each rank that arrived:
// go on, or the barrier failed. Rank 0 raises a timeout error naming the
// ranks that did not arrive (the lowest one without wait_all), or a
// peer_failure naming a dead one; a rank that arrived raises too once rank
// 0 tells it, or naming rank 0 if no answer comes within twice the timeout
// (rank 0 answers once its own wait is over).
// The per-call timeout replaces the communicator's for this call only; 0
// lets rank 0 pass only if every rank has already arrived (torch's
// monitored_barrier(timeout=0)).
// Cost: 2 (n-1) zero-or-one-byte messages through rank 0: for
// debugging, not speed (barrier.hpp is the fast one).
#pragma once

#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace chorus {

struct monitored_barrier_options {
  bool wait_all = false;  // wait out the timeout and name every rank missing, not just the first
};

namespace collective {

inline std::string rank_list(const std::vector<int>& ranks) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return text;
}

// Rank 0's side: the ranks that did not arrive (empty: all did), and the
// first failure if one came instead of an arrival.
template <class Communicator>
std::vector<int> await_arrivals(exchange<Communicator>& ex, std::chrono::milliseconds timeout, bool wait_all,
                                std::vector<typename Communicator::request>& arrivals, int& dead) {
  Communicator& comm = ex.comm();
  const int n = comm.size();
  std::vector<char> arrived(static_cast<std::size_t>(n), 0), failed(static_cast<std::size_t>(n), 0);
  arrived[0] = 1;
  const auto settled = [&] {
    bool all = true;
    for (int r = 1; r < n; ++r) {
      auto i = static_cast<std::size_t>(r);
      if (!arrived[i] && !failed[i]) {
        try {
          arrived[i] = comm.test(arrivals[i]) ? 1 : 0;
        } catch (const error&) {  // dead: it will never arrive
          failed[i] = 1;
          if (dead < 0) dead = r;
        }
      }
      all = all && (arrived[i] || failed[i]);
    }
    return all || (!wait_all && dead >= 0);
  };
  comm.transport().progress_until(settled, transport::clock::now() + timeout);
  std::vector<int> missing;
  for (int r = 1; r < n; ++r)
    if (!arrived[static_cast<std::size_t>(r)]) missing.push_back(r);
  return missing;
}

}  // namespace collective

template <class Communicator>
void monitored_barrier(Communicator& comm, std::chrono::milliseconds timeout, monitored_barrier_options options = {}) {
  using request = typename Communicator::request;
  if (timeout.count() < 0)
    throw error(errc::invalid_argument, "timeout must not be negative",
                {comm.transport().rank(), -1, "monitored_barrier"});
  collective::exchange ex(comm, "monitored_barrier");
  const int n = comm.size();
  const auto within = [](std::chrono::milliseconds waited) {
    return " within " + std::to_string(waited.count()) + " ms";
  };
  if (n == 1) return;
  // The answer: 0 go on; 1 the barrier failed at rank 0 (its error names who).
  if (comm.rank() != 0) {
    std::array<std::byte, 1> answer{std::byte{1}};
    std::array<request, 2> mine{ex.irecv(std::span<std::byte>(answer), 0, 1),
                                ex.isend(std::span<const std::byte>(), 0, 0)};
    bool answered = false;
    try {
      answered = comm.transport().progress_until([&] { return comm.test(mine[1]) && comm.test(mine[0]); },
                                                 transport::clock::now() + 2 * timeout);
    } catch (const error& failure) {
      throw error(
          errc::peer_failure,
          "rank " + std::to_string(comm.rank()) + " reached monitored_barrier, but rank 0 failed: " + failure.detail(),
          {comm.transport().rank(), comm.world_rank(0), "monitored_barrier"});
    }
    if (!answered)
      throw error(errc::timeout,
                  "rank " + std::to_string(comm.rank()) + " reached monitored_barrier, but rank 0 did not answer" +
                      within(2 * timeout) + " (rank 0's error names the ranks it waited for)",
                  {comm.transport().rank(), comm.world_rank(0), "monitored_barrier"});
    if (answer[0] != std::byte{0})
      throw error(errc::timeout,
                  "rank " + std::to_string(comm.rank()) +
                      " reached monitored_barrier, but rank 0 reports that others did not (its error names them)",
                  {comm.transport().rank(), comm.world_rank(0), "monitored_barrier"});
    return;
  }
  std::vector<request> arrivals(static_cast<std::size_t>(n));
  for (int r = 1; r < n; ++r) arrivals[static_cast<std::size_t>(r)] = ex.irecv(std::span<std::byte>(), r, 0);
  int dead = -1;
  const std::vector<int> missing = collective::await_arrivals(ex, timeout, options.wait_all, arrivals, dead);
  // Answer the ranks that came, and wait (bounded) until the answers left.
  const std::array<std::byte, 1> go{std::byte{0}}, failed{std::byte{1}};
  std::vector<request> answers;
  for (int r = 1; r < n; ++r)
    if (std::find(missing.begin(), missing.end(), r) == missing.end())
      answers.push_back(ex.isend(std::span<const std::byte>(missing.empty() ? go : failed), r, 1));
  comm.transport().progress_until(
      [&] { return std::all_of(answers.begin(), answers.end(), [&](request& sent) { return sent.done(); }); },
      transport::clock::now() + timeout);
  if (missing.empty()) return;
  const std::vector<int> named = options.wait_all ? missing : std::vector<int>{dead >= 0 ? dead : missing.front()};
  const std::string who = collective::rank_list(named);
  if (dead >= 0 && !options.wait_all)
    throw error(errc::peer_failure, who + " failed before passing monitored_barrier",
                {comm.transport().rank(), comm.world_rank(dead), "monitored_barrier"});
  throw error(errc::timeout, who + " failed to pass monitored_barrier" + within(timeout),
              {comm.transport().rank(), comm.world_rank(named.front()), "monitored_barrier"});
}

}  // namespace chorus
