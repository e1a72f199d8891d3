// Every algorithm of every collective, unmodified, over SimGrid
// (transport/simgrid_transport.hpp), checked against the serial references
// of the real tests: four jobs on one simulated star of 8 hosts, with 5
// ranks on 5 hosts, 6 on 3 hosts of 2, 4 on one host and 7 on hosts of 3, 3
// and 1; counts 0, 1, 7 and 1001; the registry's own choice too. An
// algorithm the layout cannot run (shared memory across hosts) is an
// invalid_argument error from its front door; every algorithm must run in
// at least one of the jobs. Prints what ran and the simulated time; exits
// 1 on any wrong element.
#include "collective_cases.hpp"

#include <chorus/sim/platform.hpp>
#include <chorus/sim/run.hpp>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

using chorus::sim::communicator;
using namespace chorus_test;

namespace {

struct tally {
  std::map<std::string, std::size_t> wrong;  // "collective algorithm" -> wrong elements over every job
  std::set<std::string> ran, not_here;
  void record(const std::string& name, std::size_t bad) {
    wrong[name] += bad;
    ran.insert(name);
  }
};

// Runs one call of `name` if the layout allows it; what it got wrong is recorded.
template <class Call>
void attempt(tally& results, const std::string& name, Call&& call) {
  try {
    results.record(name, call());
  } catch (const chorus::error& failure) {
    if (failure.category() != chorus::errc::invalid_argument) throw;
    if (std::getenv("SIM_DEBUG")) std::fprintf(stderr, "%s: %s\n", name.c_str(), failure.what());
    results.not_here.insert(name);
  }
}

std::string label(std::string_view collective, const chorus::algorithm& algorithm) {
  return std::string(collective) + " " + std::string(algorithm.name());
}

void every_collective(communicator& comm, tally& results, std::uint64_t job) {
  const int n = comm.size();
  const auto members = all_ranks(n);
  for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
    const std::uint64_t seed = job * 100 + count;
    for (const auto& row : chorus::entry_of<chorus::collective::allreduce_algorithms>().algorithms)
      attempt(results, label("allreduce", row.id), [&] {
        auto data = inputs<float>(comm.rank(), count, seed, flavour::general);
        chorus::allreduce(comm, std::span(data), chorus::op::sum{}, row.id);
        return count_different(data, reference<float>(members, count, seed, flavour::general, chorus::op::sum{}));
      });
    attempt(results, "allreduce auto", [&] {
      auto data = inputs<float>(comm.rank(), count, seed + 1, flavour::general);
      chorus::allreduce(comm, std::span(data));
      return count_different(data, reference<float>(members, count, seed + 1, flavour::general, chorus::op::sum{}));
    });
    const auto whole =
        reference<float>(members, count * static_cast<std::size_t>(n), seed + 2, flavour::general, chorus::op::sum{});
    const std::vector<float> mine_reduced(whole.begin() + static_cast<std::ptrdiff_t>(count * comm.rank()),
                                          whole.begin() + static_cast<std::ptrdiff_t>(count * (comm.rank() + 1)));
    for (const auto& row : chorus::entry_of<chorus::collective::reduce_scatter_algorithms>().algorithms)
      attempt(results, label("reduce_scatter", row.id), [&] {
        const auto input = inputs<float>(comm.rank(), count * static_cast<std::size_t>(n), seed + 2, flavour::general);
        std::vector<float> output(count);
        chorus::reduce_scatter(comm, std::span(input), std::span(output), chorus::op::sum{}, row.id);
        return count_different(output, mine_reduced);
      });
    std::vector<float> everyone;
    for (int r = 0; r < n; ++r) {
      const auto theirs = inputs<float>(r, count, seed + 3, flavour::general);
      everyone.insert(everyone.end(), theirs.begin(), theirs.end());
    }
    for (const auto& row : chorus::entry_of<chorus::collective::allgather_algorithms>().algorithms)
      attempt(results, label("allgather", row.id), [&] {
        const auto mine = inputs<float>(comm.rank(), count, seed + 3, flavour::general);
        std::vector<float> all(everyone.size(), -7.0f);
        chorus::allgather(comm, std::span(mine), std::span(all), row.id);
        return count_different(all, everyone);
      });
    const int root = n - 1;
    const auto rooted = inputs<float>(root, count, seed + 4, flavour::general);
    for (const auto& row : chorus::entry_of<chorus::collective::broadcast_algorithms>().algorithms)
      attempt(results, label("broadcast", row.id), [&] {
        auto data = comm.rank() == root ? rooted : std::vector<float>(count, -7.0f);
        chorus::broadcast(comm, std::span(data), root, row.id);
        return count_different(data, rooted);
      });
    attempt(results, "reduce auto", [&] {
      const auto input = inputs<float>(comm.rank(), count, seed + 5, flavour::general);
      std::vector<float> output(count, -7.0f);
      chorus::reduce(comm, std::span(input), std::span(output), root, chorus::op::sum{});
      if (comm.rank() != root) return std::size_t{0};
      return count_different(output, reference<float>(members, count, seed + 5, flavour::general, chorus::op::sum{}));
    });
    attempt(results, "gather", [&] {
      const auto mine = inputs<float>(comm.rank(), count, seed + 3, flavour::general);
      std::vector<float> all(comm.rank() == root ? everyone.size() : 0, -7.0f);
      chorus::gather(comm, std::span(mine), std::span(all), root);
      return comm.rank() == root ? count_different(all, everyone) : std::size_t{0};
    });
    attempt(results, "scatter", [&] {
      std::vector<float> all = comm.rank() == root ? everyone : std::vector<float>{};
      std::vector<float> mine(count, -7.0f);
      chorus::scatter(comm, std::span<const float>(all), std::span(mine), root);
      return count_different(mine, inputs<float>(comm.rank(), count, seed + 3, flavour::general));
    });
    attempt(results, "alltoall", [&] {
      // Block j of rank i is pattern(i, j): rank j must end with pattern(i, j) in block i.
      std::vector<float> input(count * static_cast<std::size_t>(n)), output(input.size(), -7.0f),
          expected(input.size());
      for (int j = 0; j < n; ++j)
        for (std::size_t k = 0; k < count; ++k) {
          input[static_cast<std::size_t>(j) * count + k] = static_cast<float>(comm.rank() * 1000 + j * 10 + int(k % 7));
          expected[static_cast<std::size_t>(j) * count + k] =
              static_cast<float>(j * 1000 + comm.rank() * 10 + int(k % 7));
        }
      chorus::alltoall(comm, std::span<const float>(input), std::span(output));
      return count_different(output, expected);
    });
  }
  attempt(results, "barrier", [&] {
    comm.barrier();
    return std::size_t{0};
  });
}

}  // namespace

int main(int argc, char** argv) {
  chorus::sim::engine engine(argc, argv);
  chorus::sim::platform_model model;
  model.nic = {125e6, 50e-6};  // 1 Gbit/s
  const auto hosts = chorus::sim::star(8, 1, model);
  const auto on = [&](std::initializer_list<std::pair<int, int>> layout) {  // (host, ranks on it)
    std::vector<simgrid::s4u::Host*> host_of;
    for (const auto& [host, ranks] : layout)
      for (int r = 0; r < ranks; ++r) host_of.push_back(hosts[static_cast<std::size_t>(host)]);
    return host_of;
  };
  const std::vector<std::pair<std::string, std::vector<simgrid::s4u::Host*>>> jobs{
      {"5 ranks on 5 hosts", on({{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}})},
      {"6 ranks on 3 hosts of 2", on({{0, 2}, {1, 2}, {2, 2}})},
      {"4 ranks on one host", on({{5, 4}})},
      {"7 ranks on hosts of 3, 3 and 1", on({{0, 3}, {6, 3}, {7, 1}})},
  };
  tally results;
  std::uint64_t job = 0;
  for (const auto& [name, host_of] : jobs) {
    const double started = simgrid::s4u::Engine::get_clock();
    ++job;
    chorus::sim::run(host_of, [&](communicator& comm) { every_collective(comm, results, job); });
    std::printf("sim_collectives: %s: every collective in %.3f ms of simulated time\n", name.c_str(),
                (simgrid::s4u::Engine::get_clock() - started) * 1e3);
  }
  std::size_t wrong = 0;
  for (const auto& [name, bad] : results.wrong) {
    std::printf("  %-40s %s\n", name.c_str(), bad == 0 ? "right" : ("WRONG: " + std::to_string(bad)).c_str());
    wrong += bad;
  }
  for (const std::string& name : results.not_here)
    if (!results.ran.count(name)) {
      std::printf("  %-40s ran in no job\n", name.c_str());
      ++wrong;
    }
  std::printf("sim_collectives: %s\n", wrong == 0 ? "all right" : "FAILED");
  return wrong == 0 ? 0 : 1;
}
