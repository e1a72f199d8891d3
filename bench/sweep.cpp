// Times every algorithm of one collective's list at every size, side by
// side, and prints the CHORUS_TUNE string the timings imply next to the
// defaults' choices (collective/machinery/selection.hpp), and this machine's cost
// model constants (alpha, beta, gamma) fitted to the timings.
//
//   chorus-run -n 4 sweep [allreduce|allgather|reduce_scatter|broadcast]
//                         [--min 8] [--max 64M] [--factor 2] [--rounds 3]
//
// For each size the algorithms run interleaved, round after round, so
// machine drift hits them alike; a time is the slowest rank's mean time per
// call, and the best of the rounds is kept. Sizes are what CHORUS_TUNE
// counts: the buffer for allreduce and broadcast, all n blocks for allgather
// and reduce_scatter. Each row: every algorithm's time in microseconds, the
// fastest, the defaults' choice, and its time over the fastest. The fit:
// each network algorithm's cost formula (its `seconds`) is a sum
// a alpha + b beta + c gamma; least squares over every timing gives the
// three constants.
#include <chorus/chorus.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
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

// One timing and its formula's coefficients of alpha, beta and gamma.
struct observation {
  double alpha, beta, gamma, seconds;
};

observation observe(const chorus::algorithm_facts& algorithm, const chorus::workload& w, double seconds) {
  const auto coefficient = [&](chorus::machine unit) { return algorithm.seconds(w, unit); };
  return {coefficient({1, 0, 0, 0, 0}), coefficient({0, 1, 0, 0, 0}), coefficient({0, 0, 1, 0, 0}), seconds};
}

// Least squares for (alpha, beta, gamma) by the normal equations, each
// timing weighted by 1/seconds (relative error: small and large sizes
// count alike); a constant the timings cannot tell apart is 0.
std::array<double, 3> fit(const std::vector<observation>& seen) {
  double m[3][4] = {};
  for (const observation& o : seen) {
    const double x[3] = {o.alpha / o.seconds, o.beta / o.seconds, o.gamma / o.seconds};
    for (int r = 0; r < 3; ++r) {
      for (int c = 0; c < 3; ++c) m[r][c] += x[r] * x[c];
      m[r][3] += x[r];
    }
  }
  std::array<double, 3> solved{};
  for (int c = 0; c < 3; ++c) {  // Gauss-Jordan with partial pivoting
    int pivot = c;
    for (int r = c + 1; r < 3; ++r)
      if (std::abs(m[r][c]) > std::abs(m[pivot][c])) pivot = r;
    std::swap(m[c], m[pivot]);
    if (std::abs(m[c][c]) < 1e-30) continue;
    for (int r = 0; r < 3; ++r) {
      if (r == c) continue;
      const double f = m[r][c] / m[c][c];
      for (int k = c; k < 4; ++k) m[r][k] -= f * m[c][k];
    }
  }
  for (int c = 0; c < 3; ++c)
    solved[static_cast<std::size_t>(c)] = std::abs(m[c][c]) < 1e-30 ? 0 : std::max(0.0, m[c][3] / m[c][c]);
  return solved;
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
          "Times every algorithm of a collective per size against its defaults and prints the\n"
          "CHORUS_TUNE string the timings imply and the cost model's alpha, beta and gamma fitted\n"
          "to them; run under chorus-run.\n");
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
    std::printf(" %18s %18s %7s\n", "fastest", "default", "ratio");
  }
  std::vector<observation> seen;
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
    for (std::size_t a = 0; a < best.size(); ++a)  // the network algorithms: the fit's constants are theirs
      if (!entry.algorithms[a].moves_host_memory && n > 1)
        seen.push_back(
            observe(entry.algorithms[a], {.ranks = n, .bytes = moved, .hosts = n, .ranks_per_host = 1}, best[a]));
    // What the defaults (or the cost model) take here, without this job's CHORUS_TUNE.
    const chorus::algorithm table = chorus::choose(entry, {n, moved}, chorus::algorithm::automatic, {}, {}).chosen;
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
  if (comm.rank() == 0) {
    std::printf("# measured: CHORUS_TUNE=\"%s\"\n", tune_string(collective, n, sizes, winners).c_str());
    const auto [alpha, beta, gamma] = fit(seen);
    const chorus::machine assumed;
    std::printf(
        "# cost model fitted: alpha %.2f us, beta %.3f ns/B (%.2f GB/s), gamma %.3f ns/B"
        " (chorus::machine assumes %.2f us, %.3f ns/B, %.3f ns/B)\n",
        alpha * 1e6, beta * 1e9, beta > 0 ? 1e-9 / beta : 0.0, gamma * 1e9, assumed.alpha * 1e6, assumed.beta * 1e9,
        assumed.gamma * 1e9);
  }
  return 0;
}
