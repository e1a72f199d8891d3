// Start-up at scale, one rank of it: times init() and the first allreduce
// (4 KiB), then rank 0 prints one JSON line for the job:
//   {"ranks": N, "init_max_s": ..., "init_median_s": ..., "first_allreduce_max_s": ...,
//    "ready_s": ..., "endpoints_max": ..., "endpoints_median": ...}
// ready_s is the wall time from the first rank entering main() to the last
// rank done with its first allreduce: what a user waits for after the
// launcher started the processes. bench/startup/run.py runs it under
// chorus-run (the store) and mpirun (PMIx) at 2 ... 256 processes.
#include <chorus/chorus.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <span>
#include <vector>

namespace {

double epoch_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

int main() {
  using steady = std::chrono::steady_clock;
  const double entered = epoch_seconds();
  const auto before_init = steady::now();
  chorus::communicator comm = chorus::init();
  const auto after_init = steady::now();
  std::vector<float> data(1024, 1.0f);
  chorus::allreduce(comm, std::span(data));
  const auto after_first = steady::now();
  const double done = epoch_seconds();
  const auto endpoints = static_cast<double>(comm.transport().endpoints_made());
  if (data[0] != static_cast<float>(comm.size())) {
    std::fprintf(stderr, "startup_probe: the first allreduce is wrong\n");
    return 1;
  }

  const std::array<double, 5> mine{std::chrono::duration<double>(after_init - before_init).count(),
                                   std::chrono::duration<double>(after_first - after_init).count(), entered, done,
                                   endpoints};
  std::vector<double> all(mine.size() * static_cast<std::size_t>(comm.size()));
  chorus::allgather(comm, std::span<const double>(mine), std::span(all));
  if (comm.rank() != 0) return 0;
  std::vector<double> init, first, endpoints_of;
  double first_entered = all[2], last_done = all[3], endpoints_max = 0;
  for (std::size_t at = 0; at < all.size(); at += mine.size()) {
    init.push_back(all[at]);
    first.push_back(all[at + 1]);
    first_entered = std::min(first_entered, all[at + 2]);
    last_done = std::max(last_done, all[at + 3]);
    endpoints_max = std::max(endpoints_max, all[at + 4]);
    endpoints_of.push_back(all[at + 4]);
  }
  std::sort(init.begin(), init.end());
  std::sort(first.begin(), first.end());
  std::sort(endpoints_of.begin(), endpoints_of.end());
  std::printf(
      "{\"ranks\": %d, \"init_max_s\": %.6f, \"init_median_s\": %.6f, \"first_allreduce_max_s\": %.6f, "
      "\"ready_s\": %.6f, \"endpoints_max\": %.0f, \"endpoints_median\": %.0f}\n",
      comm.size(), init.back(), init[init.size() / 2], first.back(), last_done - first_entered, endpoints_max,
      endpoints_of[endpoints_of.size() / 2]);
  return 0;
}
