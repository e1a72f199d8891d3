// The sweep loop and output format shared by the peer benchmarks, so that
// their rows line up with chorus-perf's in-place columns:
//   size(B) count type op algo time(us) min-max(us) algbw busbw #wrong
// time is the mean over ranks of each rank's mean time per iteration;
// busbw = algbw * 2(n-1)/n (nccl-tests' allreduce factor). Inputs are small
// integers (exact sums); #wrong counts elements off after one checked call.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace peer {

struct sweep_settings {
  std::size_t min_bytes = 8, max_bytes = 64u << 20, factor = 2;
  int iterations = 20, warmup = 5;
  std::size_t auto_bytes = 0;  // as chorus-perf --auto-iters
  std::string algorithm = "default";
};

inline std::size_t size_of(std::string_view text) {
  std::size_t scale = 1;
  if (!text.empty() && (text.back() == 'K' || text.back() == 'M' || text.back() == 'G')) {
    scale = text.back() == 'K' ? 1u << 10 : text.back() == 'M' ? 1u << 20 : 1u << 30;
    text.remove_suffix(1);
  }
  return std::strtoull(std::string(text).c_str(), nullptr, 10) * scale;
}

inline sweep_settings parse(int argc, char** argv) {
  sweep_settings s;
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::printf("usage: %s [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [--algo A] [--auto-iters BYTES]\n"
                  "Allreduce in chorus-perf's columns, for bench/compare.\n", argv[0]);
      std::exit(0);
    }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i], value = argv[i + 1];
    if (flag == "-b") s.min_bytes = size_of(value);
    else if (flag == "-e") s.max_bytes = size_of(value);
    else if (flag == "-f") s.factor = size_of(value);
    else if (flag == "-n") s.iterations = std::max(1, std::atoi(std::string(value).c_str()));
    else if (flag == "-w") s.warmup = std::atoi(std::string(value).c_str());
    else if (flag == "--algo") s.algorithm = value;
    else if (flag == "--auto-iters") s.auto_bytes = size_of(value);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      std::exit(2);
    }
  }
  if (s.factor < 2 || s.min_bytes == 0 || s.min_bytes > s.max_bytes) {
    std::fprintf(stderr, "need -f >= 2 and 0 < -b <= -e\n");
    std::exit(2);
  }
  return s;
}

inline float input_at(int rank, std::size_t index) { return static_cast<float>((index * 7 + static_cast<std::size_t>(rank) * 3) % 5); }

// What one library provides: its rank and size, a way to reduce three
// doubles over ranks (sum, min, max), and a float-sum allreduce runner.
struct library {
  int rank = 0, size = 1;
  std::string name;
  std::function<void(std::vector<float>&)> prepare;      // called when the buffer is (re)sized
  std::function<void(std::vector<float>&)> allreduce;    // in place
  std::function<void(double&, double&, double&)> over_ranks;  // sum, min, max
  std::function<void(std::size_t&)> sum_count;
};

inline int run(library& lib, const sweep_settings& s) {
  if (lib.rank == 0) {
    std::printf("# %s allreduce float sum in place: %d ranks, %d iterations after %d warm-up\n", lib.name.c_str(), lib.size,
                s.iterations, s.warmup);
    std::printf("#%11s %10s %9s %6s %19s %9s %17s %7s %7s %6s\n", "size(B)", "count", "type", "op", "algo", "time(us)",
                "min-max(us)", "algbw", "busbw", "#wrong");
  }
  std::size_t all_wrong = 0;
  for (std::size_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= s.factor) {
    const std::size_t count = std::max<std::size_t>(1, bytes / sizeof(float));
    std::vector<float> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = input_at(lib.rank, i);
    lib.prepare(data);
    for (int i = 0; i < s.warmup; ++i) lib.allreduce(data);
    const int iterations = s.auto_bytes == 0 ? s.iterations
                           : static_cast<int>(std::clamp<std::size_t>(s.auto_bytes / (count * sizeof(float)),
                                                                      static_cast<std::size_t>(s.iterations), 2000));
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) lib.allreduce(data);
    double sum = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
    double low = sum, high = sum;
    lib.over_ranks(sum, low, high);
    for (std::size_t i = 0; i < count; ++i) data[i] = input_at(lib.rank, i);
    lib.allreduce(data);
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < count; ++i) {
      float expected = 0;
      for (int r = 0; r < lib.size; ++r) expected += input_at(r, i);
      wrong += data[i] != expected;
    }
    lib.sum_count(wrong);
    all_wrong += wrong;
    const double mean_us = sum / lib.size * 1e6;
    const double algbw = static_cast<double>(count * sizeof(float)) / (mean_us * 1e-6) / 1e9;
    if (lib.rank == 0) {
      char range[40];
      std::snprintf(range, sizeof range, "%.1f-%.1f", low * 1e6, high * 1e6);
      std::printf(" %11zu %10zu %9s %6s %19s %9.1f %17s %7.2f %7.2f %6zu\n", count * sizeof(float), count, "float", "sum",
                  s.algorithm.c_str(), mean_us, range, algbw, algbw * 2.0 * (lib.size - 1) / lib.size, wrong);
      std::fflush(stdout);
    }
    if (bytes > s.max_bytes / s.factor) break;
  }
  return all_wrong == 0 ? 0 : 1;
}

}  // namespace peer
