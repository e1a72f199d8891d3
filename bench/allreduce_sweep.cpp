// Times every allreduce algorithm at every size, side by side, to build and
// check the decision table (collective/allreduce_select.hpp).
//
//   chorus-run -n 4 allreduce_sweep [--min 8] [--max 64M] [--factor 2] [--rounds 3]
//
// For each size the algorithms run interleaved, round after round, so
// machine drift hits them alike; a time is the slowest rank's mean time per
// call, and the best of the rounds is kept. Prints one row per size: the
// time of each algorithm in microseconds, the fastest, the table's choice,
// and the table's time relative to the fastest.
#include <chorus/chorus.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <limits>
#include <string>
#include <string_view>
#include <vector>

namespace {

std::size_t parse_size(std::string_view text) {
  const auto value = chorus::env::parse_size(text);
  chorus::require(value && *value > 0, "bad size '" + std::string(text) + "' (examples: 8, 64K, 256M)");
  return *value;
}

double seconds_per_call(chorus::communicator& comm, std::vector<float>& data, chorus::algorithm algorithm, int calls) {
  chorus::allreduce(comm, std::span(data), chorus::op::sum{}, algorithm);  // warm-up
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) chorus::allreduce(comm, std::span(data), chorus::op::sum{}, algorithm);
  std::array<double, 1> elapsed{std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / calls};
  chorus::allreduce(comm, std::span(elapsed), chorus::op::max{}, chorus::algo::recursive_doubling);
  return elapsed[0];
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::printf("usage: allreduce_sweep [--min 8] [--max 64M] [--factor 2] [--rounds 3]\n"
                  "Times every allreduce algorithm per size against the decision table; run under chorus-run.\n");
      return 0;
    }
  std::size_t min_bytes = 8, max_bytes = 64u << 20, factor = 2;
  int rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--min") min_bytes = parse_size(argv[i + 1]);
    else if (flag == "--max") max_bytes = parse_size(argv[i + 1]);
    else if (flag == "--factor") factor = parse_size(argv[i + 1]);
    else if (flag == "--rounds") rounds = static_cast<int>(parse_size(argv[i + 1]));
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  chorus::communicator comm = chorus::init();
  const chorus::algorithm algorithms[] = {chorus::algo::ring, chorus::algo::recursive_doubling,
                                          chorus::algo::rabenseifner, chorus::algo::tree};
  if (comm.rank() == 0)
    std::printf("# allreduce float sum, %d ranks, us per call (slowest rank, best of %d rounds)\n"
                "%12s %12s %12s %12s %12s %20s %20s %7s\n",
                comm.size(), rounds, "bytes", "ring", "rd", "rabenseifner", "tree", "fastest", "table", "ratio");
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    std::vector<float> data(std::max<std::size_t>(1, bytes / sizeof(float)), 1.0f);
    const int calls = static_cast<int>(std::clamp<std::size_t>((64u << 20) / bytes, 3, 1000));
    std::vector<double> best(std::size(algorithms), std::numeric_limits<double>::infinity());
    for (int round = 0; round < rounds; ++round)
      for (std::size_t a = 0; a < std::size(algorithms); ++a)
        best[a] = std::min(best[a], seconds_per_call(comm, data, algorithms[a], calls));
    const std::size_t fastest = static_cast<std::size_t>(std::min_element(best.begin(), best.end()) - best.begin());
    const chorus::algorithm table = chorus::allreduce_table(comm.size(), data.size() * sizeof(float));
    const std::size_t table_index = static_cast<std::size_t>(std::find(std::begin(algorithms), std::end(algorithms), table) - std::begin(algorithms));
    if (comm.rank() == 0)
      std::printf("%12zu %12.1f %12.1f %12.1f %12.1f %20s %20s %7.2f\n", data.size() * sizeof(float), best[0] * 1e6,
                  best[1] * 1e6, best[2] * 1e6, best[3] * 1e6, std::string(chorus::to_string(algorithms[fastest])).c_str(),
                  std::string(chorus::to_string(table)).c_str(), best[table_index] / best[fastest]);
    std::fflush(stdout);
    if (bytes > max_bytes / factor) break;
  }
  return 0;
}
