// heterogeneity: workers that differ, dialled in and reproducible from a
// seed, for studying the schemes with a straggler or with jittered steps
// (examples/fashion_mnist --slow, --jitter; Python: chorus.heterogeneity).
//
//   averaging::step_delays delays(comm.rank(), comm.size(), {.slow = {{3, 4.0}}, .jitter = jitter_from("pareto:2:1.5"), .seed = 7});
//   scheme.step([&] { delays.around([&] { model.train_batch(images, labels); }); }, apply);
//
// A slow rank's compute takes `factor` times as long, by a calibrated
// sleep: each step's compute is timed and followed by (factor - 1) times
// its own duration asleep. A sleep, not extra compute, because ranks here
// share cores (4 ranks on 2): extra compute would slow the neighbours too,
// while a sleep slows only the straggler, as a slower machine would.
// Jitter adds a delay to every step of every rank, drawn from a
// heavy-tailed distribution (at most 10 s: a longer one would meet the
// communicator's timeout before it showed a straggler):
//   exponential:MEAN_MS        mean MEAN_MS
//   pareto:SCALE_MS:ALPHA      at least SCALE_MS, tail x^-ALPHA (ALPHA <= 2: infinite variance)
//   lognormal:MEDIAN_MS:SIGMA  median MEDIAN_MS, exp(SIGMA * normal)
// The draws come from splitmix64 (core/random.hpp) seeded by (seed, rank)
// through the inverse transforms below, so a run draws the same delays
// every time, in C++ and in Python alike.
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/core/random.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace chorus::averaging {

// A rank made slower than the others: its steps' compute takes `factor`
// (>= 1) times as long.
struct slow_rank {
  int rank = -1;
  double factor = 1.0;
};

// Per-step delays from a heavy-tailed distribution (none: no delay).
struct jitter {
  enum class shape { none, exponential, pareto, lognormal };
  shape kind = shape::none;
  double scale_ms = 0.0;  // the mean, the minimum or the median
  double tail = 0.0;      // Pareto's alpha, log-normal's sigma

  static constexpr double max_seconds = 10.0;

  // One delay in seconds, drawn from `random`.
  double draw(splitmix64& random) const {
    double ms = 0.0;
    switch (kind) {
      case shape::none: return 0.0;
      case shape::exponential: ms = -scale_ms * std::log(random.uniform()); break;
      case shape::pareto: ms = scale_ms * std::pow(random.uniform(), -1.0 / tail); break;
      case shape::lognormal: ms = scale_ms * std::exp(tail * random.normal()); break;
    }
    return std::min(ms / 1e3, max_seconds);
  }
};

namespace detail {
inline double number_in(std::string_view text, std::string_view what, std::string_view spec) {
  double value = 0.0;
  const auto [end, problem] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (problem != std::errc{} || end != text.data() + text.size() || !std::isfinite(value))
    throw error(errc::invalid_argument, "\"" + std::string(spec) + "\": " + std::string(what) + " is not a number");
  return value;
}
inline std::vector<std::string_view> fields_of(std::string_view spec) {
  std::vector<std::string_view> fields;
  for (std::size_t start = 0;;) {
    const std::size_t colon = spec.find(':', start);
    fields.push_back(spec.substr(start, colon - start));
    if (colon == std::string_view::npos) return fields;
    start = colon + 1;
  }
}
}  // namespace detail

// "RANK:FACTOR", e.g. "3:4" (rank 3's steps take four times as long).
inline slow_rank slow_rank_from(std::string_view spec) {
  const std::vector<std::string_view> fields = detail::fields_of(spec);
  if (fields.size() != 2)
    throw error(errc::invalid_argument, "\"" + std::string(spec) + "\": a slow rank is RANK:FACTOR");
  const double rank = detail::number_in(fields[0], "the rank", spec);
  const double factor = detail::number_in(fields[1], "the factor", spec);
  if (rank < 0 || rank != std::floor(rank) || rank > 1e9)
    throw error(errc::invalid_argument, "\"" + std::string(spec) + "\": the rank is not a rank");
  if (factor < 1.0)
    throw error(errc::invalid_argument,
                "\"" + std::string(spec) + "\": the factor is at least 1 (a rank is slowed, not sped up)");
  return {static_cast<int>(rank), factor};
}

// "none", "exponential:MEAN_MS", "pareto:SCALE_MS:ALPHA" or
// "lognormal:MEDIAN_MS:SIGMA".
inline jitter jitter_from(std::string_view spec) {
  const std::vector<std::string_view> fields = detail::fields_of(spec);
  const auto expect = [&](std::size_t count, const char* form) {
    if (fields.size() != count) throw error(errc::invalid_argument, "\"" + std::string(spec) + "\": jitter is " + form);
  };
  jitter chosen;
  if (fields[0] == "none") {
    expect(1, "none");
    return chosen;
  }
  if (fields[0] == "exponential") {
    expect(2, "exponential:MEAN_MS");
    chosen.kind = jitter::shape::exponential;
  } else if (fields[0] == "pareto") {
    expect(3, "pareto:SCALE_MS:ALPHA");
    chosen.kind = jitter::shape::pareto;
  } else if (fields[0] == "lognormal") {
    expect(3, "lognormal:MEDIAN_MS:SIGMA");
    chosen.kind = jitter::shape::lognormal;
  } else {
    throw error(errc::invalid_argument, "\"" + std::string(spec) +
                                            "\": jitter is none, exponential:MEAN_MS, pareto:SCALE_MS:ALPHA or "
                                            "lognormal:MEDIAN_MS:SIGMA");
  }
  chosen.scale_ms = detail::number_in(fields[1], "the scale", spec);
  if (fields.size() == 3) chosen.tail = detail::number_in(fields[2], "the tail parameter", spec);
  if (chosen.scale_ms < 0 || (chosen.kind == jitter::shape::pareto && chosen.tail <= 0) ||
      (chosen.kind == jitter::shape::lognormal && chosen.tail < 0))
    throw error(errc::invalid_argument,
                "\"" + std::string(spec) + "\": the scale is >= 0, Pareto's alpha > 0, log-normal's sigma >= 0");
  return chosen;
}

struct heterogeneity_options {
  std::vector<slow_rank> slow{};
  averaging::jitter jitter{};
  std::uint64_t seed = 0;
};

// One rank's delays: around(compute) runs the compute and then sleeps what
// this rank's slowdown and jitter add to it.
class step_delays {
 public:
  // `size`: the job's ranks (a slow rank beyond them is an error).
  step_delays(int rank, int size, heterogeneity_options options)
      : factor_(factor_for(rank, size, options.slow)),
        jitter_(options.jitter),
        random_(options.seed ^ (static_cast<std::uint64_t>(rank) << 32)) {}

  // Whether this rank is delayed at all.
  bool delays() const noexcept { return factor_ > 1.0 || jitter_.kind != jitter::shape::none; }
  double factor() const noexcept { return factor_; }

  // The delay after a compute of `compute_seconds`: the slowdown's share
  // and the next jitter draw.
  double delay_after(double compute_seconds) { return (factor_ - 1.0) * compute_seconds + jitter_.draw(random_); }

  template <class Compute>
  void around(Compute&& compute) {
    if (!delays()) return static_cast<void>(compute());
    const auto start = std::chrono::steady_clock::now();
    compute();
    const double delay = delay_after(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    std::this_thread::sleep_for(std::chrono::duration<double>(delay));
    slept_ += delay;
  }

  // Seconds slept so far.
  double slept_seconds() const noexcept { return slept_; }

 private:
  static double factor_for(int rank, int size, const std::vector<slow_rank>& slow) {
    double factor = 1.0;
    for (const slow_rank& entry : slow) {
      if (entry.rank >= size)
        throw error(errc::invalid_argument,
                    "slow rank " + std::to_string(entry.rank) + " of a job of " + std::to_string(size) + " ranks");
      if (entry.rank == rank) factor = entry.factor;
    }
    return factor;
  }

  double factor_;
  jitter jitter_;
  splitmix64 random_;
  double slept_ = 0.0;
};

}  // namespace chorus::averaging
