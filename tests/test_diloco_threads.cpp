// DiLoCo and Streaming DiLoCo over the real UCX transport, ranks as threads:
// outer SGD with rate 1 and no momentum against local SGD (bit for bit), one
// worker against its inner optimizer alone, Nesterov outer steps and
// streaming fragments against a serial reference, low-bit outer gradients
// identical on every rank, and the options' errors.
#include <chorus/averaging/diloco.hpp>
#include <chorus/averaging/local_sgd.hpp>
#include <chorus/codec/minifloat.hpp>
#include <chorus/comm/run_threads.hpp>

#include "expect_error.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace avg = chorus::averaging;
using chorus::communicator;

namespace {

// Tensors of awkward sizes, 0 and 1 element included.
const std::vector<std::size_t> tensor_sizes = {7, 0, 1, 1031, 3};

struct model {
  std::vector<std::vector<float>> tensors;
  explicit model(int rank) {
    for (std::size_t t = 0; t < tensor_sizes.size(); ++t) {
      tensors.emplace_back(tensor_sizes[t]);
      for (std::size_t k = 0; k < tensor_sizes[t]; ++k)
        tensors[t][k] =
            std::sin(0.3f * static_cast<float>(k) + static_cast<float>(t)) + 0.1f * static_cast<float>(rank);
    }
  }
  avg::parameters view() {
    std::vector<std::span<float>> spans;
    for (auto& tensor : tensors) spans.emplace_back(tensor);
    return avg::parameters(spans);
  }
  std::vector<float> flat() const {
    std::vector<float> all;
    for (const auto& tensor : tensors) all.insert(all.end(), tensor.begin(), tensor.end());
    return all;
  }
};

// The inner step of rank r at step s: plain SGD on a gradient that differs
// by rank and step, so the workers drift apart between syncs.
float gradient(int rank, std::uint64_t step, std::size_t t, std::size_t k) {
  return std::cos(0.01f * static_cast<float>(k) + 0.7f * static_cast<float>(rank) + 0.13f * static_cast<float>(step) +
                  static_cast<float>(t));
}
constexpr float inner_rate = 0.05f;

void inner_step(model& m, int rank, std::uint64_t step) {
  for (std::size_t t = 0; t < m.tensors.size(); ++t)
    for (std::size_t k = 0; k < m.tensors[t].size(); ++k) m.tensors[t][k] -= inner_rate * gradient(rank, step, t, k);
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Each rank's model after `steps` inner steps under a scheme made by `make`
// and its finish(); models[r] also records the model after every step.
template <class Make>
std::vector<std::vector<std::vector<float>>> train(int ranks, std::uint64_t steps, Make make) {
  std::vector<std::vector<std::vector<float>>> trace(static_cast<std::size_t>(ranks));
  std::mutex mutex;
  chorus::run_threads(ranks, [&](communicator& comm) {
    model m(comm.rank());
    auto scheme = make(comm, m.view());
    std::vector<std::vector<float>> mine;
    for (std::uint64_t s = 1; s <= steps; ++s) {
      inner_step(m, comm.rank(), s);
      scheme.end_step();
      mine.push_back(m.flat());
    }
    scheme.finish();
    mine.push_back(m.flat());
    std::lock_guard lock(mutex);
    trace[static_cast<std::size_t>(comm.rank())] = std::move(mine);
  });
  return trace;
}

// The serial reference of (Streaming) DiLoCo with the built-in outer SGD, in
// double: every rank starts from rank 0's model; fragment f (tensors t % P)
// syncs at steps s with s mod H == f H / P, its outer gradient (theta minus
// the mean of the models at s) steps theta at s + tau, and each worker's
// fragment becomes alpha local + (1 - alpha) theta then. Returns the final
// global model (after finish's last syncs).
std::vector<double> reference(int ranks, std::uint64_t steps, const avg::diloco_options& o) {
  const std::size_t tensors = tensor_sizes.size(), P = o.fragments;
  std::vector<std::vector<std::vector<double>>> x(static_cast<std::size_t>(ranks));
  const model start(0);
  for (auto& worker : x)
    for (const auto& tensor : start.tensors) worker.emplace_back(tensor.begin(), tensor.end());
  std::vector<std::vector<double>> theta = x[0], velocity = x[0];
  for (auto& v : velocity) std::fill(v.begin(), v.end(), 0.0);
  struct pending_sync {
    std::uint64_t at;
    std::size_t fragment;
    std::vector<std::vector<double>> mean;
  };
  std::vector<pending_sync> pending;
  const auto mean_of = [&](std::size_t f) {
    std::vector<std::vector<double>> mean(tensors);
    for (std::size_t t = f; t < tensors; t += P) {
      mean[t].assign(tensor_sizes[t], 0.0);
      for (const auto& worker : x)
        for (std::size_t k = 0; k < tensor_sizes[t]; ++k) mean[t][k] += worker[t][k] / ranks;
    }
    return mean;
  };
  const auto outer = [&](const pending_sync& sync, bool merge) {
    const double rate = o.outer.learning_rate, mu = o.outer.momentum;
    for (std::size_t t = sync.fragment; t < tensors; t += P)
      for (std::size_t k = 0; k < tensor_sizes[t]; ++k) {
        const double g = theta[t][k] - sync.mean[t][k];
        double& v = velocity[t][k];
        v = mu * v + g;
        theta[t][k] -= rate * (o.outer.nesterov ? g + mu * v : v);
        if (merge)
          for (auto& worker : x) worker[t][k] = o.mixing * worker[t][k] + (1 - o.mixing) * theta[t][k];
      }
  };
  for (std::uint64_t s = 1; s <= steps; ++s) {
    for (int r = 0; r < ranks; ++r)
      for (std::size_t t = 0; t < tensors; ++t)
        for (std::size_t k = 0; k < tensor_sizes[t]; ++k)
          x[static_cast<std::size_t>(r)][t][k] -=
              static_cast<double>(inner_rate) * static_cast<double>(gradient(r, s, t, k));
    for (auto it = pending.begin(); it != pending.end();)
      if (it->at == s) {
        outer(*it, true);
        it = pending.erase(it);
      } else {
        ++it;
      }
    for (std::size_t f = 0; f < P; ++f)
      if (s % o.period == f * o.period / P) {
        pending_sync sync{s + o.overlap_steps, f, mean_of(f)};
        if (o.overlap_steps == 0)
          outer(sync, true);
        else
          pending.push_back(std::move(sync));
      }
  }
  for (const pending_sync& sync : pending) outer(sync, true);
  for (std::size_t f = 0; f < P; ++f)
    if (steps % o.period != f * o.period / P) outer({0, f, mean_of(f)}, false);
  std::vector<double> all;
  for (const auto& tensor : theta) all.insert(all.end(), tensor.begin(), tensor.end());
  return all;
}

double worst_gap(const std::vector<float>& got, const std::vector<double>& expected) {
  double worst = 0;
  for (std::size_t k = 0; k < got.size(); ++k) worst = std::max(worst, std::fabs(got[k] - expected[k]));
  return worst;
}

}  // namespace

TEST_CASE("DiLoCo with outer SGD at rate 1 and no momentum is local SGD, bit for bit, every step") {
  for (int ranks : {2, 3, 5}) {
    CAPTURE(ranks);
    const auto diloco = train(ranks, 13, [](communicator& c, avg::parameters p) {
      return avg::diloco(c, p, {.period = 4, .outer = {.learning_rate = 1.0, .momentum = 0.0}});
    });
    // local SGD from rank 0's model, as DiLoCo starts.
    const auto local = train(ranks, 13, [](communicator& c, avg::parameters p) {
      std::vector<float> start = model(0).flat();
      p.copy_from(start);
      return avg::local_sgd(c, p, {.period = 4});
    });
    std::size_t differing = 0;
    for (std::size_t r = 0; r < diloco.size(); ++r)
      for (std::size_t s = 0; s < diloco[r].size(); ++s) differing += !same_bits(diloco[r][s], local[r][s]);
    CHECK(differing == 0);
  }
}

TEST_CASE("DiLoCo on one worker with outer rate 1 and no momentum is its inner optimizer alone") {
  const auto trace = train(1, 11, [](communicator& c, avg::parameters p) {
    return avg::diloco(c, p, {.period = 3, .outer = {.learning_rate = 1.0, .momentum = 0.0}});
  });
  model alone(0);
  for (std::uint64_t s = 1; s <= 11; ++s) inner_step(alone, 0, s);
  CHECK(same_bits(trace[0].back(), alone.flat()));
}

TEST_CASE("DiLoCo's Nesterov outer steps against a serial reference; every rank ends every round the same") {
  for (int ranks : {1, 3, 4}) {
    CAPTURE(ranks);
    const avg::diloco_options options{.period = 5};
    const auto trace = train(ranks, 17, [&](communicator& c, avg::parameters p) { return avg::diloco(c, p, options); });
    for (std::size_t s : {4u, 9u, 14u, 17u})  // after the syncs at steps 5, 10 and 15, and after finish
      for (const auto& rank : trace) CHECK(same_bits(rank[s], trace[0][s]));
    CHECK(worst_gap(trace[0].back(), reference(ranks, 17, options)) < 2e-5);
  }
}

TEST_CASE("Streaming DiLoCo: strided fragments on staggered steps, overlapped and mixed, against the reference") {
  for (int ranks : {2, 3}) {
    for (const avg::diloco_options& options :
         {avg::diloco_options{.period = 6, .fragments = 3},
          avg::diloco_options{.period = 6, .fragments = 3, .overlap_steps = 2, .mixing = 0.5},
          avg::diloco_options{.period = 4, .fragments = 5, .overlap_steps = 3}}) {
      CAPTURE(ranks);
      CAPTURE(options.fragments);
      CAPTURE(options.overlap_steps);
      const auto trace =
          train(ranks, 19, [&](communicator& c, avg::parameters p) { return avg::diloco(c, p, options); });
      for (const auto& rank : trace) CHECK(same_bits(rank.back(), trace[0].back()));
      CHECK(worst_gap(trace[0].back(), reference(ranks, 19, options)) < 2e-5);
    }
  }
}

TEST_CASE("Streaming DiLoCo with one fragment and no overlap is plain DiLoCo, bit for bit") {
  const auto plain = train(3, 12, [](communicator& c, avg::parameters p) { return avg::diloco(c, p, {.period = 4}); });
  const auto streaming = train(3, 12, [](communicator& c, avg::parameters p) {
    return avg::diloco(c, p, {.period = 4, .fragments = 1, .fragment_of = {0, 0, 0, 0, 0}, .overlap_steps = 0});
  });
  for (std::size_t r = 0; r < plain.size(); ++r)
    for (std::size_t s = 0; s < plain[r].size(); ++s) CHECK(same_bits(plain[r][s], streaming[r][s]));
}

TEST_CASE("DiLoCo with fp8 and fp4 outer gradients: the same bits on every rank, near fp32 DiLoCo") {
  const auto run = [&](const char* wire) {
    return train(3, 24, [&](communicator& c, avg::parameters p) {
      return avg::diloco(c, p, {.period = 4, .codec = chorus::codec::by_name(wire)});
    });
  };
  const auto full = run("identity");
  const std::vector<double> reference(full[0].back().begin(), full[0].back().end());
  // fp4's step near the top of a block is a quarter of the block's largest
  // value, fp8 e4m3's a sixteenth. Error feedback sends what a round lost in
  // the next, but the sum each round's allreduce encodes once more is not
  // fed back: after six rounds the models sit within a few steps of the
  // outer gradients (about 0.2 here) of fp32's, fp4 about four times
  // farther than fp8 (measured: 0.022 and 0.080).
  std::vector<double> gaps;
  for (const auto& [wire, within] : {std::pair{"fp8_e4m3", 0.04}, std::pair{"fp4_e2m1", 0.15}}) {
    CAPTURE(std::string(wire));
    const auto low = run(wire);
    for (const auto& rank : low) CHECK(same_bits(rank.back(), low[0].back()));
    gaps.push_back(worst_gap(low[0].back(), reference));
    CHECK(gaps.back() < within);
  }
  CHECK(gaps[1] > 2 * gaps[0]);
}

TEST_CASE("DiLoCo options: clear errors") {
  chorus::run_threads(2, [](communicator& comm) {
    model m(comm.rank());
    const auto fails = [&](avg::diloco_options options, const char* says) {
      chorus_test::expect_error([&] { avg::diloco(comm, m.view(), std::move(options)); },
                                chorus::errc::invalid_argument, says);
    };
    fails({.period = 0}, "the period H must be at least 1");
    fails({.fragments = 6}, "6 fragments of 5 tensors");
    fails({.fragments = 0}, "0 fragments");
    fails({.period = 4, .overlap_steps = 4}, "must be below the period");
    fails({.mixing = 1.5}, "mixing (alpha) must be in [0, 1]");
    fails({.fragments = 2, .fragment_of = {0, 1}}, "fragment_of names 2 tensors of 5");
    fails({.fragments = 2, .fragment_of = {0, 1, 2, 0, 1}}, "fragment_of names fragment 2 of 2");
    fails({.fragments = 2, .fragment_of = {0, 0, 0, 0, 0}}, "fragment 1 has no tensor");
  });
}

namespace {

// Rounds as tests of time, samples and weights see them: rank r takes
// steps_in(r, k) inner steps in round k (its own step count s going on
// across rounds, each step worth samples(r, s)), then theta steps by the
// outer gradient theta - sum_r w_r x_r / W (w_r: r's samples in the round;
// no step when W = 0) and every worker continues from theta. Plain DiLoCo
// (one fragment, no overlap), in double.
template <class StepsIn, class Samples>
std::vector<double> rounds_reference(int ranks, std::size_t rounds, StepsIn steps_in, Samples samples,
                                     const avg::outer_sgd& outer) {
  const std::vector<float> start = model(0).flat();
  const std::vector<double> first(start.begin(), start.end());
  std::vector<std::vector<double>> x(static_cast<std::size_t>(ranks), first);
  std::vector<double> theta = first, velocity(first.size(), 0.0);
  std::vector<std::uint64_t> step(static_cast<std::size_t>(ranks), 0);
  for (std::size_t k = 0; k < rounds; ++k) {
    std::vector<double> weighted(first.size(), 0.0);
    double total = 0;
    for (int r = 0; r < ranks; ++r) {
      auto& mine = x[static_cast<std::size_t>(r)];
      double w = 0;
      for (std::uint64_t j = 0; j < steps_in(r, k); ++j) {
        const std::uint64_t s = ++step[static_cast<std::size_t>(r)];
        std::size_t at = 0;
        for (std::size_t t = 0; t < tensor_sizes.size(); ++t)
          for (std::size_t e = 0; e < tensor_sizes[t]; ++e, ++at)
            mine[at] -= static_cast<double>(inner_rate) * static_cast<double>(gradient(r, s, t, e));
        w += static_cast<double>(samples(r, s));
      }
      for (std::size_t e = 0; e < mine.size(); ++e) weighted[e] += w * mine[e];
      total += w;
    }
    if (total > 0)
      for (std::size_t e = 0; e < theta.size(); ++e) {
        const double g = theta[e] - weighted[e] / total;
        velocity[e] = outer.momentum * velocity[e] + g;
        theta[e] -= outer.learning_rate * (outer.nesterov ? g + outer.momentum * velocity[e] : velocity[e]);
      }
    for (auto& worker : x) worker = theta;
  }
  return theta;
}

struct timed_run {
  std::vector<std::vector<float>> final;                  // each rank's model after finish
  std::vector<std::vector<std::uint64_t>> job_samples;    // each rank's job_samples() as it changed
  std::vector<double> first_round_seconds;                // each rank's first T > 0
  std::vector<avg::averaging_stats> stats;
};

// Each rank on a clock of its own that advances step_seconds(r) per inner
// step and not otherwise (syncs take no time), for steps_of(r) steps.
template <class StepSeconds, class StepsOf, class Samples>
timed_run train_timed(int ranks, StepSeconds step_seconds, StepsOf steps_of, Samples samples,
                      avg::diloco_options options) {
  timed_run run;
  run.final.resize(static_cast<std::size_t>(ranks));
  run.job_samples.resize(static_cast<std::size_t>(ranks));
  run.first_round_seconds.resize(static_cast<std::size_t>(ranks));
  run.stats.resize(static_cast<std::size_t>(ranks));
  std::mutex mutex;
  chorus::run_threads(ranks, [&](communicator& comm) {
    const int r = comm.rank();
    double now = 0;
    avg::diloco_options mine = options;
    mine.clock = [&now] { return now; };
    model m(r);
    avg::diloco scheme(comm, m.view(), mine);
    std::vector<std::uint64_t> seen;
    double first_round_seconds = 0;
    for (std::uint64_t s = 1; s <= steps_of(r); ++s) {
      now += step_seconds(r);
      inner_step(m, r, s);
      scheme.end_step(samples(r, s));
      if (seen.empty() || scheme.job_samples() != seen.back()) seen.push_back(scheme.job_samples());
      if (first_round_seconds == 0) first_round_seconds = scheme.round_seconds();
    }
    scheme.finish();
    seen.push_back(scheme.job_samples());
    std::lock_guard lock(mutex);
    const auto at = static_cast<std::size_t>(r);
    run.final[at] = m.flat();
    run.job_samples[at] = std::move(seen);
    run.first_round_seconds[at] = first_round_seconds;
    run.stats[at] = scheme.stats();
  });
  return run;
}

std::uint64_t samples_varying(int rank, std::uint64_t step) { return 1 + (static_cast<std::uint64_t>(rank) + step) % 3; }

}  // namespace

TEST_CASE("DiLoCo weighs each worker's model by the samples it processed in the round") {
  for (int ranks : {1, 3, 4}) {
    for (const avg::outer_sgd& outer : {avg::outer_sgd{.learning_rate = 1.0, .momentum = 0.0}, avg::outer_sgd{}}) {
      CAPTURE(ranks);
      CAPTURE(outer.momentum);
      // Rounds by steps (H = 4), 14 steps: three rounds and finish's two steps.
      const auto run = train_timed(
          ranks, [](int) { return 1.0; }, [](int) { return std::uint64_t{14}; }, samples_varying,
          {.period = 4, .outer = outer});
      const auto expected = rounds_reference(
          ranks, 4, [](int, std::size_t k) { return k < 3 ? std::uint64_t{4} : std::uint64_t{2}; }, samples_varying,
          outer);
      for (const auto& rank : run.final) CHECK(same_bits(rank, run.final[0]));
      CHECK(worst_gap(run.final[0], expected) < 2e-5);
      std::uint64_t all = 0;
      for (int r = 0; r < ranks; ++r)
        for (std::uint64_t s = 1; s <= 14; ++s) all += samples_varying(r, s);
      CHECK(run.job_samples[0].back() == all);
    }
  }
}

TEST_CASE("DiLoCo rounds by compute time: a 4x slower worker takes a quarter of the steps, weighted by them") {
  for (int ranks : {2, 3, 5}) {
    CAPTURE(ranks);
    // Rank 0's steps take 4 s, the others' 1 s; a round is 8 s of compute:
    // rank 0 syncs every 2 steps, the others every 8, five rounds.
    const auto seconds = [](int r) { return r == 0 ? 4.0 : 1.0; };
    const auto steps = [](int r) { return r == 0 ? std::uint64_t{10} : std::uint64_t{40}; };
    const auto one = [](int, std::uint64_t) { return std::uint64_t{1}; };
    const auto run = train_timed(ranks, seconds, steps, one, {.round_seconds = 8.0});
    const auto expected = rounds_reference(
        ranks, 5, [](int r, std::size_t) { return r == 0 ? std::uint64_t{2} : std::uint64_t{8}; }, one,
        avg::outer_sgd{});
    for (const auto& rank : run.final) CHECK(same_bits(rank, run.final[0]));
    CHECK(worst_gap(run.final[0], expected) < 2e-5);
    for (const auto& stats : run.stats) CHECK(stats.exchanges == 6);  // five rounds and finish's
    const std::vector<std::uint64_t> progress = {0, 2 + 8u * (ranks - 1u)};
    CHECK(run.job_samples[0][1] == progress[1]);
    CHECK(run.job_samples[0].back() == 5 * progress[1]);
  }
}

TEST_CASE("DiLoCo rounds by the job's samples: T follows the job's rate, and each round processes about N") {
  // Speeds 1/4, 1 and 1 samples a second, 80 s each; N = 20, two
  // fragments. The first round ends at N / n samples on every worker; from
  // the rates it measured, T = 20 / 2.25 s, and each round then processes
  // N within a step of each worker (a step's overshoot, or the
  // stagger's).
  const auto seconds = [](int r) { return r == 0 ? 4.0 : 1.0; };
  const auto steps = [](int r) { return r == 0 ? std::uint64_t{20} : std::uint64_t{80}; };
  const auto one = [](int, std::uint64_t) { return std::uint64_t{1}; };
  const auto run = train_timed(3, seconds, steps, one, {.round_samples = 20, .fragments = 2});
  for (const auto& rank : run.final) CHECK(same_bits(rank, run.final[0]));
  for (const auto& seen : run.job_samples) CHECK(seen.back() == run.job_samples[0].back());
  for (double T : run.first_round_seconds) CHECK(T == 20.0 / 2.25);
  CHECK(run.job_samples[0].back() == 20 + 80 + 80);
  // Rank 1 sees every sync (one a step at most): two in a round, past the
  // first round and before finish's.
  const auto& seen = run.job_samples[1];
  for (std::size_t j = 3; j + 3 < seen.size(); j += 2) {
    CAPTURE(j);
    CHECK(seen[j + 1] - seen[j - 1] >= 20 - 3);
    CHECK(seen[j + 1] - seen[j - 1] <= 20 + 3);
  }
}

TEST_CASE("DiLoCo by time with fragments and overlap: workers stopping at different times end with the same bits") {
  for (int ranks : {2, 3}) {
    CAPTURE(ranks);
    // Rank 1 stops after 16 s of compute, the others after 40 s; P = 3
    // fragments, each sync overlapping two inner steps, mixing 0.25.
    const auto seconds = [](int r) { return r == 0 ? 2.0 : 1.0; };
    const auto steps = [](int r) { return r == 1 ? std::uint64_t{16} : r == 0 ? std::uint64_t{20} : std::uint64_t{40}; };
    const auto run = train_timed(ranks, seconds, steps, samples_varying,
                                 {.period = 3, .round_seconds = 6.0, .fragments = 3, .overlap_steps = 2, .mixing = 0.25});
    for (const auto& rank : run.final) CHECK(same_bits(rank, run.final[0]));
    for (const auto& seen : run.job_samples) CHECK(seen.back() == run.job_samples[0].back());
    std::uint64_t all = 0;
    for (int r = 0; r < ranks; ++r)
      for (std::uint64_t s = 1; s <= steps(r); ++s) all += samples_varying(r, s);
    CHECK(run.job_samples[0].back() == all);
  }
}

TEST_CASE("DiLoCo stopping early: the leaver's rounds weigh nothing, the rest train on to the reference") {
  // Rank 1 stops at 16 s (two rounds of 8 s); the others go on to 40 s.
  const auto seconds = [](int) { return 1.0; };
  const auto steps = [](int r) { return r == 1 ? std::uint64_t{16} : std::uint64_t{40}; };
  const auto run = train_timed(3, seconds, steps, samples_varying, {.round_seconds = 8.0});
  const auto expected = rounds_reference(
      3, 5, [](int r, std::size_t k) { return r == 1 && k >= 2 ? std::uint64_t{0} : std::uint64_t{8}; },
      samples_varying, avg::outer_sgd{});
  for (const auto& rank : run.final) CHECK(same_bits(rank, run.final[0]));
  CHECK(worst_gap(run.final[0], expected) < 2e-5);
}
