// A peer library's allreduce (float sum, in place) through chorus-perf's
// harness (tools/perf/harness.hpp): the same sizes, timing, check and
// printer, so a peer's rows line up with chorus-perf's in-place columns and
// bench/compare reads both alike. A peer gives its rank and size, a barrier,
// reductions of the timings, and the allreduce itself.
#pragma once

#include "perf/harness.hpp"

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

namespace peer {

struct settings : perf::sweep_settings {
  std::string algorithm = "default";
};

inline settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::printf("usage: %s %s [--algo A]\nAllreduce in chorus-perf's columns, for bench/compare.\n", argv[0],
                  std::string(perf::sweep_usage).c_str());
      std::exit(0);
    }
  try {
    for (int i = 1; i < argc; i += 2) {
      const std::string_view flag = argv[i];
      if (i + 1 >= argc) throw perf::usage_error(std::string(flag) + " needs a value");
      if (perf::take_sweep_flag(s, flag, argv[i + 1])) continue;
      if (flag != "--algo") throw perf::usage_error("unknown option " + std::string(flag));
      s.algorithm = argv[i + 1];
    }
    perf::validate(s);
  } catch (const perf::usage_error& problem) {
    std::fprintf(stderr, "%s: %s\n", argv[0], problem.what());
    std::exit(2);
  }
  return s;
}

// A rank or the job size from the first of `names` that the launcher set
// (chorus-run: CHORUS_RANK/CHORUS_SIZE; Intel MPI's mpiexec: PMI_RANK/PMI_SIZE);
// without any, `program` exits saying so.
inline int from_launcher(const char* program, std::initializer_list<const char*> names) {
  for (const char* name : names)
    if (const char* value = std::getenv(name)) return std::atoi(value);
  std::string tried;
  for (const char* name : names) tried += std::string(tried.empty() ? "" : " or ") + name;
  std::fprintf(stderr, "%s: %s is not set (start it with its launcher)\n", program, tried.c_str());
  std::exit(2);
}

// Takes a peer's own flags, each with a value, out of argv into `flags`;
// returns the rest (argv[0] first), for parse().
inline std::vector<char*> take_flags(int argc, char** argv,
                                     std::initializer_list<std::pair<std::string_view, std::string*>> flags) {
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    bool taken = false;
    for (const auto& [flag, value] : flags)
      if (!taken && argv[i] == flag && i + 1 < argc) {
        *value = argv[++i];
        taken = true;
      }
    if (!taken) rest.push_back(argv[i]);
  }
  return rest;
}

// What one library provides.
struct library {
  int rank = 0, size = 1;
  std::string name;
  std::function<void(std::vector<float>&)> prepare;    // called when the buffer is (re)sized
  std::function<void(std::vector<float>&)> allreduce;  // in place
  std::function<void()> barrier;
  std::function<void(double&, double&, double&)> over_ranks;  // sum, min, max
  std::function<void(std::uint64_t&)> sum_count;
};

class library_world final : public perf::world {
 public:
  explicit library_world(library& lib) : lib_(lib) {}
  int rank() const override { return lib_.rank; }
  int size() const override { return lib_.size; }
  void barrier() override { lib_.barrier(); }
  void sum_min_max(double& sum, double& low, double& high) override { lib_.over_ranks(sum, low, high); }
  void sum(std::uint64_t& count) override { lib_.sum_count(count); }

 private:
  library& lib_;
};

// Inputs are the small integers chorus-perf uses, so every sum is exact.
inline float input_at(int rank, std::size_t index) {
  return static_cast<float>((index * 7 + static_cast<std::size_t>(rank) * 3) % 5);
}

class allreduce_case final : public perf::benchmark_case {
 public:
  allreduce_case(library& lib, std::string algorithm) : lib_(lib), algorithm_(std::move(algorithm)) {}

  void resize(std::size_t bytes) override {
    data_.assign(std::max<std::size_t>(1, bytes / sizeof(float)), 0.0f);
    lib_.prepare(data_);
  }
  std::size_t bytes() const override { return data_.size() * sizeof(float); }
  std::size_t count() const override { return data_.size(); }
  bool has(perf::form f) const override { return f == perf::form::in_place; }
  void fill() override {
    for (std::size_t i = 0; i < data_.size(); ++i) data_[i] = input_at(lib_.rank, i);
  }
  void run(perf::form) override { lib_.allreduce(data_); }
  std::uint64_t wrong(perf::form) const override {
    std::uint64_t wrong = 0;
    for (std::size_t i = 0; i < data_.size(); ++i) {
      float expected = 0;
      for (int r = 0; r < lib_.size; ++r) expected += input_at(r, i);
      wrong += data_[i] != expected;
    }
    return wrong;
  }
  std::string algorithm() const override { return algorithm_; }

 private:
  library& lib_;
  std::string algorithm_;
  std::vector<float> data_;
};

inline int run(library& lib, const settings& s) {
  library_world ranks(lib);
  allreduce_case bench(lib, s.algorithm);
  char title[160];
  std::snprintf(title, sizeof title, "%s allreduce float sum in place: %d ranks, %d iterations after %d warm-up",
                lib.name.c_str(), lib.size, s.iterations, s.warmup);
  const double factor = 2.0 * (lib.size - 1) / lib.size;
  return perf::sweep(ranks, s, perf::table{title, "allreduce", "float", "sum", factor, {perf::form::in_place}}, bench);
}

}  // namespace peer
