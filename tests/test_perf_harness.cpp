// chorus-perf's harness (tools/perf/harness.hpp), which the peer benchmarks
// share: the sizes it sweeps, how many times it repeats a call, the order in
// which it fills, times and checks, how #wrong adds up over ranks into the
// exit status, and the JSON it writes. A fake library stands in for the
// ranks: two ranks whose reductions are computed here by hand.
#include "perf/harness.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Rank 0 of two; the other rank's timings and counts are fixed, so the sums,
// minima and maxima the harness reports are known.
class two_ranks final : public perf::world {
 public:
  double other_seconds = 1.0;  // the other rank's mean seconds per call
  std::uint64_t other_wrong = 0;
  int barriers = 0;

  int rank() const override { return 0; }
  int size() const override { return 2; }
  void barrier() override { ++barriers; }
  void sum_min_max(double& sum, double& low, double& high) override {
    low = std::min(low, other_seconds);
    high = std::max(high, other_seconds);
    sum += other_seconds;
  }
  void sum(std::uint64_t& count) override { count += other_wrong; }
};

// Records what the harness asks of it; `wrong_after_fill` elements are
// wrong in a checked run.
class recording_case final : public perf::benchmark_case {
 public:
  bool in_place = true;
  std::uint64_t wrong_after_fill = 0;
  std::vector<std::string> calls;
  std::size_t resized_to = 0;

  void resize(std::size_t bytes) override {
    resized_to = bytes;
    calls.push_back("resize");
  }
  std::size_t bytes() const override { return resized_to; }
  std::size_t count() const override { return resized_to / 4; }
  bool has(perf::form f) const override { return f == perf::form::out_of_place || in_place; }
  void fill() override { calls.push_back("fill"); }
  void run(perf::form) override { calls.push_back("run"); }
  std::uint64_t wrong(perf::form) const override { return wrong_after_fill; }
  std::string algorithm() const override { return "fake"; }
};

perf::sweep_settings settings_from(std::vector<std::string> arguments) {
  perf::sweep_settings s;
  for (std::size_t i = 0; i + 1 < arguments.size(); i += 2)
    REQUIRE(perf::take_sweep_flag(s, arguments[i], arguments[i + 1]));
  perf::validate(s);
  return s;
}

std::string read_all(const std::string& path) {
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("harness: the sizes of a sweep") {
  CHECK(perf::sizes(settings_from({"-b", "8", "-e", "4K", "-f", "8"})) == std::vector<std::size_t>{8, 64, 512, 4096});
  CHECK(perf::sizes(settings_from({"-b", "3", "-e", "100", "-f", "10"})) == std::vector<std::size_t>{3, 30});
  CHECK(perf::sizes(settings_from({"-b", "1K", "-e", "1K"})) == std::vector<std::size_t>{1024});
  // The sweep stops before a size past the maximum, without computing it.
  const auto huge = perf::sizes(settings_from({"-b", "1", "-e", "16G", "-f", "4G"}));
  CHECK(huge == std::vector<std::size_t>{1, 4ull << 30});
}

TEST_CASE("harness: bad command lines are usage errors") {
  perf::sweep_settings s;
  CHECK_THROWS_AS(perf::take_sweep_flag(s, "-b", "lots"), perf::usage_error);
  CHECK_THROWS_AS(perf::take_sweep_flag(s, "-n", "-3"), perf::usage_error);
  CHECK_FALSE(perf::take_sweep_flag(s, "--algo", "ring"));  // not a sweep flag: the tool's own
  s.factor = 1;
  CHECK_THROWS_AS(perf::validate(s), perf::usage_error);
  s.factor = 2;
  s.min_bytes = 0;
  CHECK_THROWS_AS(perf::validate(s), perf::usage_error);
}

TEST_CASE("harness: --auto-iters repeats small sizes, within [iterations, 2000]") {
  const auto s = settings_from({"-n", "5", "--auto-iters", "1M"});
  CHECK(perf::iterations_for(s, 1 << 20) == 5);                     // one call moves enough; never fewer than -n
  CHECK(perf::iterations_for(s, 4096) == 256);                      // 1 MiB / 4 KiB
  CHECK(perf::iterations_for(s, 8) == 2000);                        // capped
  CHECK(perf::iterations_for(s, 0) == 2000);                        // an empty buffer
  CHECK(perf::iterations_for(settings_from({"-n", "7"}), 8) == 7);  // -n alone: exactly
  CHECK(perf::iterations_for(settings_from({"--auto-iters", "1M", "-n", "7"}), 4096) == 256);
  CHECK(perf::iterations_for(settings_from({}), 4096) == 2000);     // the default: 64 MiB, capped
  CHECK(perf::iterations_for(settings_from({}), 16u << 20) == 20);  // never fewer than the default -n
}

TEST_CASE("harness: fill, warm up, barrier, time; then fill, run once and check") {
  two_ranks ranks;
  recording_case bench;
  bench.resize(64);
  bench.calls.clear();
  const auto s = settings_from({"-n", "3", "-w", "2"});
  const perf::measurement m = perf::measure(ranks, s, bench, perf::form::out_of_place);
  CHECK(bench.calls == std::vector<std::string>{"fill", "run", "run", "run", "run", "run", "fill", "run"});
  CHECK(ranks.barriers == 1);
  // The other rank took 1 s per call, this one microseconds: the mean over
  // ranks is about 0.5 s, the slowest 1 s.
  CHECK(m.max_us == doctest::Approx(1e6));
  CHECK(m.mean_us == doctest::Approx(0.5e6).epsilon(0.01));
  CHECK(m.min_us < 1e5);

  bench.calls.clear();
  perf::measure(ranks, settings_from({"-n", "1", "-w", "0", "-c", "0"}), bench, perf::form::in_place);
  CHECK(bench.calls == std::vector<std::string>{"fill", "run"});  // no checked run with -c 0
}

TEST_CASE("harness: #wrong adds up over ranks and sizes into the exit status and the JSON") {
  const std::string json = "perf_harness_test.json";
  std::remove(json.c_str());
  two_ranks ranks;
  ranks.other_seconds = 1e-3;
  recording_case bench;
  bench.in_place = false;
  auto s = settings_from({"-b", "1K", "-e", "4K", "-f", "4", "-n", "1", "-w", "0", "--json", json});
  const perf::table t{
      "test table", "fake_collective", "float", "-", 0.5, {perf::form::out_of_place, perf::form::in_place}};

  CHECK(perf::sweep(ranks, s, t, bench) == 0);
  const std::string clean = read_all(json);
  CHECK(clean.find("\"collective\": \"fake_collective\", \"ranks\": 2, \"size\": 1024, \"count\": 256") !=
        std::string::npos);
  CHECK(clean.find("\"size\": 4096") != std::string::npos);
  CHECK(clean.find("\"algo\": \"fake\"") != std::string::npos);
  CHECK(clean.find("out_of_place") != std::string::npos);
  CHECK(clean.find("in_place") == std::string::npos);  // the case has no in-place form
  CHECK(clean.find("\"wrong\": 0") != std::string::npos);

  ranks.other_wrong = 3;  // only the other rank sees wrong elements
  CHECK(perf::sweep(ranks, s, t, bench) == 1);
  CHECK(read_all(json).find("\"wrong\": 3") != std::string::npos);
  std::remove(json.c_str());
}
