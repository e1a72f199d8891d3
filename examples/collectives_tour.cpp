// A tour of the collectives, as a trainer would call them. Each rank checks
// its results against what it can compute alone and exits non-zero if any
// differ.
//
//   chorus-run -n 3 collectives_tour
#include <chorus/chorus.hpp>

#include <cstdio>
#include <numeric>
#include <string_view>
#include <vector>

int main(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h";
    std::printf(
        "usage: collectives_tour   (under a launcher: chorus-run -n 3 collectives_tour)\n"
        "Calls each collective once and checks the results; exit status 1 if any is wrong.\n");
    return help ? 0 : 2;
  }
  chorus::communicator comm = chorus::init();
  const int n = comm.size(), rank = comm.rank();
  int failures = 0;
  const auto expect = [&](bool ok, const char* what) {
    if (!ok) {
      std::printf("rank %d: %s is wrong\n", rank, what);
      ++failures;
    }
  };
  const float triangle = static_cast<float>(n * (n + 1) / 2);  // sum of rank + 1

  std::vector<float> grads(1000, static_cast<float>(rank + 1));
  const chorus::algorithm used = chorus::allreduce(comm, grads);
  expect(grads.front() == triangle && grads.back() == triangle, "allreduce");

  std::vector<float> averaged(10, static_cast<float>(rank + 1));
  chorus::allreduce(comm, averaged, chorus::op::avg{}, chorus::algo::ring);
  expect(averaged[3] == triangle / static_cast<float>(n), "allreduce avg over the ring");

  std::vector<chorus::half> weights(77, chorus::half(rank == 0 ? 0.5f : -1.0f));
  chorus::broadcast(comm, std::span(weights), 0);
  expect(static_cast<float>(weights[76]) == 0.5f, "broadcast");

  std::vector<int> mine(3, rank), all(3 * static_cast<std::size_t>(n));
  chorus::allgather(comm, std::span<const int>(mine), std::span(all));
  expect(all[3 * static_cast<std::size_t>(n) - 1] == n - 1, "allgather");

  std::vector<double> blocks(2 * static_cast<std::size_t>(n), 1.0), block(2);
  chorus::reduce_scatter(comm, std::span<const double>(blocks), std::span(block));
  expect(block[1] == n, "reduce_scatter");

  std::vector<float> layer_a(100, 1.0f), layer_b(5000, 2.0f);
  auto pending = chorus::iallreduce(comm, std::span(layer_a));
  std::vector<std::span<float>> layers{std::span(layer_b)};
  chorus::fused_allreduce(comm, layers);
  pending.wait();
  expect(layer_a[99] == static_cast<float>(n) && layer_b[0] == 2.0f * static_cast<float>(n), "iallreduce and fusion");

  chorus::barrier(comm);
  if (rank == 0)
    std::printf("collectives tour on %d ranks: %s (the first allreduce ran %s)\n", n, failures ? "FAILED" : "ok",
                std::string(chorus::to_string(used)).c_str());
  return failures == 0 ? 0 : 1;
}
