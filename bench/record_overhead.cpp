// What the flight recorder costs: allreduces of 1 KiB, 1 MiB and 64 MiB
// with recording on (the default 2048 entries) and off (the journal's
// set_recording(false)), in alternating rounds of one job, and the cost of
// one recorded call alone.
//
//   chorus-run -n 2 record_overhead [--rounds 9] [--sizes 1K,1M,64M]
//
// Prints per size the median time per call on and off and the median of
// the rounds' ratios (on / off - 1): the overhead, with its spread.
#include <chorus/chorus.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Seconds per allreduce of `bytes`, rank 0's mean over `iterations` after
// a warm-up, every rank recording or not.
double seconds_per_call(chorus::communicator& comm, std::vector<float>& data, int iterations, bool record) {
  comm.journal()->set_recording(record);
  for (int i = 0; i < std::max(3, iterations / 10); ++i) chorus::allreduce(comm, data);
  comm.barrier();
  const auto start = clock_type::now();
  for (int i = 0; i < iterations; ++i) chorus::allreduce(comm, data);
  const double elapsed = std::chrono::duration<double>(clock_type::now() - start).count();
  comm.journal()->set_recording(true);
  std::array<double, 1> slowest{elapsed / iterations};
  chorus::allreduce(comm, slowest, chorus::op::max{});
  return slowest[0];
}

// One recorded call on its own: constructed, given an algorithm, finished.
double seconds_per_recorded_call() {
  chorus::record::journal book(0, 0, 1, {});
  chorus::record::ring ring(0, {0}, 0, chorus::record::default_entries);
  const std::vector<float> data(256);
  const auto described = chorus::record::collective("allreduce", std::span(data), "sum");
  constexpr int calls = 2'000'000;
  const auto start = clock_type::now();
  for (int i = 0; i < calls; ++i) {
    const chorus::record::recorded_call recorded({&ring, &book}, described);
    chorus::record::recorded_call::chose("recursive_doubling");
  }
  return std::chrono::duration<double>(clock_type::now() - start).count() / calls;
}

std::size_t parse_size(std::string_view text) {
  const auto parsed = chorus::env::parse_size(text);
  if (!parsed || *parsed < sizeof(float)) {
    std::fprintf(stderr, "record_overhead: bad size %.*s\n", static_cast<int>(text.size()), text.data());
    std::exit(2);
  }
  return *parsed;
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 9;
  std::vector<std::size_t> sizes{1 << 10, 1 << 20, 64 << 20};
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf("usage: chorus-run -n 2 record_overhead [--rounds 9] [--sizes 1K,1M,64M]\n");
      return 0;
    }
    if (flag == "--rounds" && i + 1 < argc) {
      rounds = std::max(1, std::atoi(argv[++i]));
    } else if (flag == "--sizes" && i + 1 < argc) {
      sizes.clear();
      std::string_view list = argv[++i];
      while (!list.empty()) {
        const std::size_t comma = list.find(',');
        sizes.push_back(parse_size(list.substr(0, comma)));
        list = comma == std::string_view::npos ? std::string_view() : list.substr(comma + 1);
      }
    } else {
      std::fprintf(stderr, "record_overhead: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  chorus::communicator comm = chorus::init();
  const bool printing = comm.rank() == 0;
  if (printing) {
    std::printf("# one recorded call alone: %.1f ns\n", seconds_per_recorded_call() * 1e9);
    std::printf("# allreduce at %d ranks, %d alternating rounds; time per call in us (the slowest rank's)\n",
                comm.size(), rounds);
    std::printf("# %10s %12s %12s %10s %18s\n", "size(B)", "recording", "off", "overhead", "rounds min..max");
  }
  for (const std::size_t bytes : sizes) {
    std::vector<float> data(bytes / sizeof(float), 1.0f);
    // About 0.2 s of allreduces per round and setting.
    const int iterations =
        static_cast<int>(std::clamp(0.2 / (5e-6 + static_cast<double>(bytes) * 1.5e-10), 10.0, 40000.0));
    std::vector<double> on, off, ratios;
    for (int round = 0; round < rounds; ++round) {
      const bool on_first = round % 2 == 0;  // ABBA: neither setting always runs second
      const double first = seconds_per_call(comm, data, iterations, on_first);
      const double second = seconds_per_call(comm, data, iterations, !on_first);
      on.push_back(on_first ? first : second);
      off.push_back(on_first ? second : first);
      ratios.push_back(on.back() / off.back() - 1);
    }
    if (printing)
      std::printf("  %10zu %12.2f %12.2f %9.2f%% %8.2f%%..%.2f%%\n", bytes, median(on) * 1e6, median(off) * 1e6,
                  median(ratios) * 100, *std::min_element(ratios.begin(), ratios.end()) * 100,
                  *std::max_element(ratios.begin(), ratios.end()) * 100);
  }
  return 0;
}
