// Heterogeneity (averaging/heterogeneity.hpp): the generator against its
// published sequence, each jitter distribution against its closed form
// (mean, median, tail), the slowdown's arithmetic, reproducibility from a
// seed, and clear errors for bad specifications. Python's twin
// (python/tests/test_heterogeneity.py) checks the same draws.
#include <chorus/averaging/heterogeneity.hpp>

#include "expect_error.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <thread>
#include <vector>

namespace avg = chorus::averaging;

namespace {

std::vector<double> draws(const avg::jitter& shape, std::size_t count, std::uint64_t seed = 11) {
  chorus::splitmix64 random(seed);
  std::vector<double> values(count);
  for (double& value : values) value = shape.draw(random) * 1e3;  // in ms
  return values;
}

double median(std::vector<double> values) {
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(values.size() / 2), values.end());
  return values[values.size() / 2];
}

double fraction_above(const std::vector<double>& values, double threshold) {
  return static_cast<double>(std::count_if(values.begin(), values.end(), [&](double v) { return v > threshold; })) /
         static_cast<double>(values.size());
}

constexpr std::size_t samples = 200000;

}  // namespace

TEST_CASE("splitmix64 draws the published sequence (seed 1234567)") {
  chorus::splitmix64 random(1234567);
  const std::uint64_t expected[] = {6457827717110365317ull, 3203168211198807973ull, 9817491932198370423ull,
                                    4593380528125082431ull, 16408922859458223821ull};
  for (std::uint64_t value : expected) CHECK(random.next() == value);
}

TEST_CASE("each jitter distribution matches its closed form") {
  SUBCASE("exponential: mean and median") {
    const std::vector<double> ms = draws(avg::jitter_from("exponential:4"), samples);
    double mean = 0;
    for (double v : ms) mean += v / samples;
    CHECK(mean == doctest::Approx(4.0).epsilon(0.01));
    CHECK(median(ms) == doctest::Approx(4.0 * std::log(2.0)).epsilon(0.01));
  }
  SUBCASE("Pareto: never below the scale, median scale * 2^(1/alpha), tail (scale/x)^alpha") {
    const std::vector<double> ms = draws(avg::jitter_from("pareto:2:1.5"), samples);
    CHECK(*std::min_element(ms.begin(), ms.end()) >= 2.0);
    CHECK(median(ms) == doctest::Approx(2.0 * std::pow(2.0, 1 / 1.5)).epsilon(0.01));
    CHECK(fraction_above(ms, 20.0) == doctest::Approx(std::pow(0.1, 1.5)).epsilon(0.05));
  }
  SUBCASE("log-normal: median, and P(X > median * e^sigma) = 1 - Phi(1)") {
    const std::vector<double> ms = draws(avg::jitter_from("lognormal:3:0.8"), samples);
    CHECK(median(ms) == doctest::Approx(3.0).epsilon(0.01));
    CHECK(fraction_above(ms, 3.0 * std::exp(0.8)) == doctest::Approx(0.158655).epsilon(0.02));
  }
  SUBCASE("none draws nothing; every draw is capped at 10 s") {
    for (double v : draws(avg::jitter_from("none"), 100)) CHECK(v == 0.0);
    const std::vector<double> ms = draws(avg::jitter_from("pareto:1000:0.5"), 10000);
    CHECK(*std::max_element(ms.begin(), ms.end()) == 1e4);
  }
}

TEST_CASE("a slow rank sleeps (factor - 1) times its compute; the others do not") {
  const avg::heterogeneity_options options{.slow = {avg::slow_rank_from("2:4")}, .jitter = {}, .seed = 5};
  avg::step_delays slow(2, 3, options), other(1, 3, options);
  CHECK(slow.factor() == 4.0);
  CHECK(slow.delays());
  CHECK_FALSE(other.delays());
  CHECK(slow.delay_after(0.25) == doctest::Approx(0.75));
  CHECK(other.delay_after(0.25) == 0.0);
  SUBCASE("around() runs the compute once and sleeps at least the delay after it") {
    int computed = 0;
    const auto start = std::chrono::steady_clock::now();
    slow.around([&] {
      ++computed;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    });
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    CHECK(computed == 1);
    CHECK(slow.slept_seconds() >= 0.03);  // 3 x a compute of at least 10 ms
    CHECK(took >= 0.04);
  }
}

TEST_CASE("the same seed and rank draw the same delays; other ranks and seeds draw others") {
  const avg::heterogeneity_options options{.slow = {}, .jitter = avg::jitter_from("lognormal:2:1"), .seed = 42};
  avg::step_delays first(1, 4, options), again(1, 4, options), other_rank(2, 4, options);
  avg::heterogeneity_options reseeded = options;
  reseeded.seed = 43;
  avg::step_delays other_seed(1, 4, reseeded);
  int same_as_other_rank = 0, same_as_other_seed = 0;
  for (int k = 0; k < 100; ++k) {
    const double d = first.delay_after(0);
    CHECK(again.delay_after(0) == d);
    same_as_other_rank += other_rank.delay_after(0) == d;
    same_as_other_seed += other_seed.delay_after(0) == d;
  }
  CHECK(same_as_other_rank == 0);
  CHECK(same_as_other_seed == 0);
}

TEST_CASE("the draws Python's twin must match (python/tests/test_heterogeneity.py)") {
  // Seed 7, rank 1, pareto:2:1.5 then lognormal:3:0.5 then exponential:4.
  avg::step_delays pareto(1, 2, {.slow = {}, .jitter = avg::jitter_from("pareto:2:1.5"), .seed = 7});
  CHECK(pareto.delay_after(0) == doctest::Approx(0.006916231568).epsilon(1e-6));
  CHECK(pareto.delay_after(0) == doctest::Approx(0.00210721848).epsilon(1e-6));
  avg::step_delays lognormal(1, 2, {.slow = {}, .jitter = avg::jitter_from("lognormal:3:0.5"), .seed = 7});
  CHECK(lognormal.delay_after(0) == doctest::Approx(0.007079283552).epsilon(1e-6));
  avg::step_delays exponential(1, 2, {.slow = {}, .jitter = avg::jitter_from("exponential:4"), .seed = 7});
  CHECK(exponential.delay_after(0) == doctest::Approx(0.007444343218).epsilon(1e-6));
}

TEST_CASE("bad specifications are clear errors") {
  for (const char* spec : {"3", "3:", "x:2", "-1:2", "1.5:2", "2:0.5", "1:2:3", "2:nan"})
    CHECK_THROWS_AS(avg::slow_rank_from(spec), chorus::error);
  for (const char* spec : {"", "pareto", "pareto:1", "pareto:1:0", "pareto:-1:2", "exponential", "exponential:1:2",
                           "lognormal:1", "lognormal:1:-1", "gauss:1", "none:1", "exponential:abc"})
    CHECK_THROWS_AS(avg::jitter_from(spec), chorus::error);
  chorus_test::expect_error([] { avg::step_delays(0, 4, {.slow = {{5, 2.0}}, .jitter = {}, .seed = 0}); },
                            chorus::errc::invalid_argument, "slow rank 5 of a job of 4 ranks");
}
