// A rank started by any launcher (mpirun, srun, chorus-run): init() from
// whatever the environment offers, then collectives checked against their
// closed forms, a split (whose id comes from the job's store: under PMIx,
// joined on that first use), and what start-up made, on one line:
//   ok rank R of N hosts H local L endpoints E
// Exits 1 with the reason on a wrong result. START_PROBE_EXPECT_SIZE, when
// set, is the size the launcher was asked for.
#include <chorus/chorus.hpp>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

namespace {

int fail(const std::string& why) {
  std::fprintf(stderr, "start_probe: %s\n", why.c_str());
  return 1;
}

// Sum over ranks of (rank * 1000 + i), for 1001 elements: blocks that do not divide evenly.
bool allreduce_right(chorus::communicator& comm, chorus::algorithm algorithm) {
  const int n = comm.size();
  std::vector<double> data(1001);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = comm.rank() * 1000.0 + static_cast<double>(i);
  chorus::allreduce(comm, std::span(data), algorithm);
  for (std::size_t i = 0; i < data.size(); ++i)
    if (data[i] != 1000.0 * n * (n - 1) / 2 + n * static_cast<double>(i)) return false;
  return true;
}

}  // namespace

int main() {
  try {
    chorus::communicator world = chorus::init();
    if (const char* expected = std::getenv("START_PROBE_EXPECT_SIZE"); expected && std::atoi(expected) != world.size())
      return fail("size " + std::to_string(world.size()) + ", expected " + expected);
    if (!allreduce_right(world, chorus::algorithm::automatic)) return fail("allreduce (auto) is wrong");
    if (!allreduce_right(world, chorus::algorithm::ring)) return fail("allreduce (ring) is wrong");
    chorus::communicator halves = world.split(world.rank() % 2, world.rank());
    if (!allreduce_right(halves, chorus::algorithm::automatic)) return fail("allreduce over a split is wrong");
    std::vector<int> ranks(static_cast<std::size_t>(world.size()));
    std::vector<int> mine{world.rank()};
    chorus::allgather(world, std::span<const int>(mine), std::span(ranks));
    for (int r = 0; r < world.size(); ++r)
      if (ranks[static_cast<std::size_t>(r)] != r) return fail("allgather is wrong");
    const chorus::host_layout& layout = world.layout();
    std::printf("ok rank %d of %d hosts %d local %zu endpoints %zu\n", world.rank(), world.size(), layout.hosts,
                layout.local.size(), world.transport().endpoints_made());
    return 0;
  } catch (const chorus::error& failure) {
    return fail(failure.what());
  }
}
