// Times every algorithm the selection registry offers for one collective, at
// every size, side by side, and prints the CHORUS_TUNE string the timings
// imply next to the measured table's choices (collective/selection.hpp).
//
//   chorus-run -n 4 sweep [allreduce|allgather|reduce_scatter|broadcast]
//                         [--min 8] [--max 64M] [--factor 2] [--rounds 3]
//
// For each size the algorithms run interleaved, round after round, so
// machine drift hits them alike; a time is the slowest rank's mean time per
// call, and the best of the rounds is kept. Sizes are what CHORUS_TUNE
// counts: the buffer for allreduce and broadcast, all n blocks for allgather
// and reduce_scatter. Each row: every algorithm's time in microseconds, the
// fastest, the table's choice, and the table's time over the fastest.
#include <chorus/chorus.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
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

std::string size_text(std::size_t bytes) {
  if (bytes >= (1u << 30) && bytes % (1u << 30) == 0) return std::to_string(bytes >> 30) + "G";
  if (bytes >= (1u << 20) && bytes % (1u << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes >= (1u << 10) && bytes % (1u << 10) == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

// One call of `collective` with `algorithm` on `data` (its size already
// rounded to what the collective accepts).
void call(chorus::communicator& comm, std::string_view collective, std::vector<float>& data, std::vector<float>& out,
          chorus::algorithm algorithm) {
  if (collective == "allreduce")
    chorus::allreduce(comm, std::span(data), chorus::op::sum{}, algorithm);
  else if (collective == "allgather")
    chorus::allgather(comm, std::span(data), algorithm);
  else if (collective == "reduce_scatter")
    chorus::reduce_scatter(comm, std::span<const float>(data), std::span(out), chorus::op::sum{}, algorithm);
  else
    chorus::broadcast(comm, std::span(data), 0, algorithm);
}

double seconds_per_call(chorus::communicator& comm, const std::function<void()>& once, int calls) {
  once();  // warm-up
  comm.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < calls; ++i) once();
  std::array<double, 1> elapsed{std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() /
                                calls};
  chorus::allreduce(comm, std::span(elapsed), chorus::op::max{}, chorus::algo::recursive_doubling);
  return elapsed[0];
}

// Consecutive sizes with the same winner become one rule; a rule starts at
// the first size it won (the first at 0) and the last is open-ended.
std::string tune_string(std::string_view collective, int ranks, const std::vector<std::size_t>& sizes,
                        const std::vector<chorus::algorithm>& winners) {
  std::string text = std::string(collective) + "@" + std::to_string(ranks) + ":";
  for (std::size_t i = 0; i < sizes.size();) {
    std::size_t j = i;
    while (j + 1 < sizes.size() && winners[j + 1] == winners[i]) ++j;
    const std::string low = i == 0 ? "0" : size_text(sizes[i]);
    const std::string high = j + 1 < sizes.size() ? size_text(sizes[j + 1]) : "";
    text += (i == 0 ? "" : ",") + low + "-" + high + ":" + std::string(chorus::to_string(winners[i]));
    i = j + 1;
  }
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  std::string collective = "allreduce";
  std::size_t min_bytes = 8, max_bytes = 64u << 20, factor = 2;
  int rounds = 3;
  int i = 1;
  if (argc > 1 && argv[1][0] != '-') collective = argv[i++];
  for (int k = 1; k < argc; ++k)
    if (std::string_view(argv[k]) == "--help" || std::string_view(argv[k]) == "-h") {
      std::printf(
          "usage: sweep [allreduce|allgather|reduce_scatter|broadcast] [--min 8] [--max 64M] [--factor 2] "
          "[--rounds 3]\n"
          "Times every algorithm of a collective per size against the measured table and prints the\n"
          "CHORUS_TUNE string the timings imply; run under chorus-run.\n");
      return 0;
    }
  for (; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--min")
      min_bytes = parse_size(argv[i + 1]);
    else if (flag == "--max")
      max_bytes = parse_size(argv[i + 1]);
    else if (flag == "--factor")
      factor = parse_size(argv[i + 1]);
    else if (flag == "--rounds")
      rounds = static_cast<int>(parse_size(argv[i + 1]));
    else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (collective != "allreduce" && collective != "allgather" && collective != "reduce_scatter" &&
      collective != "broadcast") {
    std::fprintf(stderr, "sweep: '%s' is not allreduce, allgather, reduce_scatter or broadcast\n", collective.c_str());
    return 2;
  }
  chorus::communicator comm = chorus::init();
  const int n = comm.size();
  const chorus::collective_entry& entry = chorus::registered(collective);
  if (comm.rank() == 0) {
    std::printf("# %s float, %d ranks, us per call (slowest rank, best of %d rounds)\n%12s", collective.c_str(), n,
                rounds, "bytes");
    for (const auto& algorithm : entry.algorithms) std::printf(" %18s", std::string(to_string(algorithm.id)).c_str());
    std::printf(" %18s %18s %7s\n", "fastest", "table", "ratio");
  }
  std::vector<std::size_t> sizes;
  std::vector<chorus::algorithm> winners;
  const bool blocks = collective == "allgather" || collective == "reduce_scatter";
  for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
    std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
    if (blocks) count = std::max<std::size_t>(1, count / static_cast<std::size_t>(n)) * static_cast<std::size_t>(n);
    std::vector<float> data(count, 1.0f), out(count / (blocks ? static_cast<std::size_t>(n) : 1));
    const int calls = static_cast<int>(std::clamp<std::size_t>((64u << 20) / bytes, 3, 1000));
    std::vector<double> best(entry.algorithms.size(), std::numeric_limits<double>::infinity());
    for (int round = 0; round < rounds; ++round)
      for (std::size_t a = 0; a < best.size(); ++a)
        best[a] = std::min(
            best[a], seconds_per_call(comm, [&] { call(comm, collective, data, out, entry.algorithms[a].id); }, calls));
    const auto fastest = static_cast<std::size_t>(std::min_element(best.begin(), best.end()) - best.begin());
    const std::size_t moved = count * sizeof(float);
    const chorus::algorithm table = entry.table({n, moved});
    std::size_t table_index = 0;
    while (entry.algorithms[table_index].id != table) ++table_index;
    sizes.push_back(moved);
    winners.push_back(entry.algorithms[fastest].id);
    if (comm.rank() == 0) {
      std::printf("%12zu", moved);
      for (double t : best) std::printf(" %18.1f", t * 1e6);
      std::printf(" %18s %18s %7.2f\n", std::string(to_string(entry.algorithms[fastest].id)).c_str(),
                  std::string(to_string(table)).c_str(), best[table_index] / best[fastest]);
    }
    std::fflush(stdout);
    if (bytes > max_bytes / factor) break;
  }
  if (comm.rank() == 0)
    std::printf("# measured: CHORUS_TUNE=\"%s\"\n", tune_string(collective, n, sizes, winners).c_str());
  return 0;
}
