// Averaging schemes over the real UCX transport, ranks as threads: the
// invariants of the issue (average preserved by a doubly stochastic step,
// GoSGD's sum-weights, consensus with learning rate 0, local SGD H = 1 ==
// allreduce-SGD, EASGD against its closed form), convergence of every scheme
// on a least-squares problem, and ranks that finish at different times.
#include <chorus/chorus.hpp>

#include "support.hpp"

#include "expect_error.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using chorus::communicator;
using chorus_test::quick;
namespace avg = chorus::averaging;

namespace {

// A model split into tensors of awkward sizes (0 and 1 element included).
const std::vector<std::size_t> tensor_sizes = {7, 0, 1, 4099};

struct model {
  std::vector<std::vector<float>> storage;
  explicit model(int rank) {
    for (std::size_t t = 0; t < tensor_sizes.size(); ++t) {
      storage.emplace_back(tensor_sizes[t]);
      for (std::size_t k = 0; k < tensor_sizes[t]; ++k) storage[t][k] = initial(rank, t, k);
    }
  }
  static float initial(int rank, std::size_t t, std::size_t k) {
    return std::sin(0.37f * static_cast<float>(rank + 1) + 0.011f * static_cast<float>(k) + static_cast<float>(t)) *
           (1.0f + 0.5f * static_cast<float>(rank));
  }
  avg::parameters view() {
    std::vector<std::span<float>> spans;
    for (auto& tensor : storage) spans.emplace_back(tensor);
    return avg::parameters(spans);
  }
  std::vector<float> flat() const {
    std::vector<float> all;
    for (const auto& tensor : storage) all.insert(all.end(), tensor.begin(), tensor.end());
    return all;
  }
};

std::size_t model_size() { return std::accumulate(tensor_sizes.begin(), tensor_sizes.end(), std::size_t{0}); }

// The serial reference: the mean of the initial models, in double.
std::vector<double> initial_mean(int ranks) {
  std::vector<double> mean(model_size(), 0.0);
  for (int r = 0; r < ranks; ++r) {
    const std::vector<float> x = model(r).flat();
    for (std::size_t k = 0; k < mean.size(); ++k) mean[k] += static_cast<double>(x[k]) / ranks;
  }
  return mean;
}

double max_gap(const std::vector<float>& x, const std::vector<double>& reference) {
  double gap = 0;
  for (std::size_t k = 0; k < x.size(); ++k) gap = std::max(gap, std::fabs(x[k] - reference[k]));
  return gap;
}

// Collects one value per rank under a lock, for checks after run_threads.
template <class T>
struct per_rank {
  std::mutex mutex;
  std::vector<T> values;
  explicit per_rank(int ranks) : values(static_cast<std::size_t>(ranks)) {}
  void set(int rank, T value) {
    std::lock_guard lock(mutex);
    values[static_cast<std::size_t>(rank)] = std::move(value);
  }
};

void no_op() {}

}  // namespace

TEST_CASE("one D-PSGD mixing step equals W X and preserves the average, for several topologies") {
  const int n = 6;
  for (const avg::topology& t : {avg::topology::ring(n), avg::topology::torus(2, 3), avg::topology::exponential(n),
                                 avg::topology::from_weights({{0.5, 0.5, 0, 0, 0, 0},
                                                              {0.5, 0.25, 0.25, 0, 0, 0},
                                                              {0, 0.25, 0.25, 0.5, 0, 0},
                                                              {0, 0, 0.5, 0.5, 0, 0},
                                                              {0, 0, 0, 0, 0.5, 0.5},
                                                              {0, 0, 0, 0, 0.5, 0.5}})}) {
    CAPTURE(t.name());
    per_rank<std::vector<float>> after(n);
    chorus::run_threads(
        n,
        [&](communicator& comm) {
          model mine(comm.rank());
          avg::dpsgd scheme(comm, mine.view(), {.topology = t});
          scheme.step(no_op, no_op);  // learning rate 0: mixing alone
          after.set(comm.rank(), mine.flat());
        },
        quick());
    const auto dense = t.at(0).dense();
    std::vector<std::vector<float>> initial;
    for (int r = 0; r < n; ++r) initial.push_back(model(r).flat());
    std::vector<double> mean_after(model_size(), 0.0);
    for (int i = 0; i < n; ++i) {
      std::vector<double> expected(model_size(), 0.0);  // row i of W X, in double
      for (int j = 0; j < n; ++j)
        for (std::size_t k = 0; k < expected.size(); ++k)
          expected[k] +=
              dense[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] * initial[static_cast<std::size_t>(j)][k];
      CHECK(max_gap(after.values[static_cast<std::size_t>(i)], expected) < 1e-5);
      for (std::size_t k = 0; k < mean_after.size(); ++k)
        mean_after[k] += after.values[static_cast<std::size_t>(i)][k] / n;
    }
    const std::vector<double> mean = initial_mean(n);
    double gap = 0;
    for (std::size_t k = 0; k < mean.size(); ++k) gap = std::max(gap, std::fabs(mean_after[k] - mean[k]));
    CHECK(gap < 1e-6);
  }
}

TEST_CASE("D-PSGD with an fp16 wire still preserves the average exactly (mixing against the decoded self)") {
  const int n = 5;
  per_rank<std::vector<float>> after(n);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        model mine(comm.rank());
        avg::dpsgd scheme(comm, mine.view(), {.codec = chorus::codec::by_name("fp16")});
        for (int round = 0; round < 3; ++round) scheme.step(no_op, no_op);
        after.set(comm.rank(), mine.flat());
      },
      quick());
  const std::vector<double> mean = initial_mean(n);
  std::vector<double> mean_after(model_size(), 0.0);
  for (const auto& x : after.values)
    for (std::size_t k = 0; k < x.size(); ++k) mean_after[k] += x[k] / n;
  double gap = 0;
  for (std::size_t k = 0; k < mean.size(); ++k) gap = std::max(gap, std::fabs(mean_after[k] - mean[k]));
  CHECK(gap < 1e-5);  // fp16 itself is off by ~1e-3 here: the average is not
}

TEST_CASE("with learning rate 0, D-PSGD on a ring of 5 reaches consensus at the mean in a bounded number of rounds") {
  const int n = 5;
  per_rank<double> distance(n);
  per_rank<std::vector<float>> final_models(n);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        model mine(comm.rank());
        avg::dpsgd scheme(comm, mine.view());
        for (int round = 0; round < 60; ++round) scheme.step(no_op, no_op);  // gap 0.46: 0.54^60 ~ 1e-16
        distance.set(comm.rank(), avg::consensus_distance(comm, mine.view()));
        final_models.set(comm.rank(), mine.flat());
        CHECK(scheme.stats().exchanges == 60);
        CHECK(scheme.stats().bytes_sent == 60u * 2u * model_size() * sizeof(float));  // two neighbours, every round
      },
      quick());
  for (double d : distance.values) CHECK(d < 1e-6);
  CHECK(max_gap(final_models.values[0], initial_mean(n)) < 1e-5);
}

TEST_CASE("the one-peer exponential graph reaches the exact mean in log2(n) rounds") {
  for (int n : {4, 8}) {
    CAPTURE(n);
    per_rank<std::vector<float>> after(n);
    chorus::run_threads(
        n,
        [&](communicator& comm) {
          model mine(comm.rank());
          avg::dpsgd scheme(comm, mine.view(), {.topology = avg::topology::one_peer_exponential(n)});
          for (int round = 0; round < static_cast<int>(std::log2(n)); ++round) scheme.step(no_op, no_op);
          after.set(comm.rank(), mine.flat());
        },
        quick());
    const std::vector<double> mean = initial_mean(n);
    for (const auto& x : after.values) CHECK(max_gap(x, mean) < 2e-6);
  }
}

TEST_CASE("GoSGD: every quiesce() is a consistent cut (sum a = 1, sum a x unchanged); consensus with learning rate 0") {
  // Ranks stop at different times in every round and push again right after
  // quiesce() returns, so a fast rank's next push races the slow ranks' drain:
  // merging it before their cut would count its weight twice.
  const int n = 5;
  const int rounds = 6;
  per_rank<std::vector<double>> weights(n);                // per round
  per_rank<std::vector<std::vector<double>>> weighted(n);  // per round: a x
  per_rank<double> distance(n);
  per_rank<std::uint64_t> merges(n);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        model mine(comm.rank());
        avg::gosgd scheme(comm, mine.view(), {.push_probability = 0.7, .seed = 11});
        std::vector<double> my_weights;
        std::vector<std::vector<double>> my_weighted;
        for (int round = 0; round < rounds; ++round) {
          const int steps = 4 + 3 * ((comm.rank() + round) % n);
          for (int step = 0; step < steps; ++step)  // the first step of a round pushes without delay
            scheme.step(
                [&] {
                  if (step > 0) std::this_thread::sleep_for(std::chrono::microseconds(100 * (comm.rank() + 1)));
                },
                no_op);
          scheme.quiesce();
          my_weights.push_back(scheme.weight());
          std::vector<double> ax;
          for (float value : mine.flat()) ax.push_back(scheme.weight() * value);
          my_weighted.push_back(std::move(ax));
        }
        weights.set(comm.rank(), my_weights);
        weighted.set(comm.rank(), my_weighted);
        // A push is skipped while 4 wait to be merged, so how many are sent in
        // 150 steps depends on the threads' pace: gossip until consensus, in
        // rounds every rank agrees on (the distance is collective).
        double gap = 1.0;
        for (int round = 0; round < 40 && gap >= 1e-6; ++round) {
          for (int step = 0; step < 150; ++step) scheme.step(no_op, no_op);
          scheme.quiesce();
          gap = avg::consensus_distance(comm, mine.view());
        }
        distance.set(comm.rank(), gap);
        merges.set(comm.rank(), scheme.stats().merges);
        scheme.finish();
      },
      quick());
  const std::vector<double> mean = initial_mean(n);
  for (std::size_t round = 0; round < rounds; ++round) {
    CAPTURE(round);
    double weight_sum = 0;
    std::vector<double> sum(model_size(), 0.0);
    for (int r = 0; r < n; ++r) {
      weight_sum += weights.values[static_cast<std::size_t>(r)][round];
      const std::vector<double>& ax = weighted.values[static_cast<std::size_t>(r)][round];
      for (std::size_t k = 0; k < ax.size(); ++k) sum[k] += ax[k];
    }
    CHECK(weight_sum == doctest::Approx(1.0).epsilon(1e-12));
    double gap = 0;
    for (std::size_t k = 0; k < mean.size(); ++k) gap = std::max(gap, std::fabs(sum[k] - mean[k]));
    CHECK(gap < 1e-5);
  }
  for (double d : distance.values) CHECK(d < 1e-6);
  CHECK(std::accumulate(merges.values.begin(), merges.values.end(), std::uint64_t{0}) > 100);
}

TEST_CASE(
    "GoSGD between a step and quiesce(): a collective or another scheme's step over its peers raises, never stalls") {
  const int n = 4;
  per_rank<int> refused(n);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        int refusals = 0;
        const auto refuses = [&](auto&& call, std::string_view operation) {
          try {
            call();
          } catch (const chorus::error& failure) {
            const std::string text = failure.what();
            const bool named = text.find("gosgd") != std::string::npos && text.find("quiesce()") != std::string::npos &&
                               text.find(operation) != std::string::npos;
            CHECK_MESSAGE(failure.category() == chorus::errc::invalid_argument, text);
            CHECK_MESSAGE(named, text);
            refusals += failure.category() == chorus::errc::invalid_argument && named;
          }
        };
        model mine(comm.rank()), other(comm.rank());
        communicator pairs = comm.split(comm.rank() / 2, comm.rank());   // {0, 1}, {2, 3}: the gossip
        communicator across = comm.split(comm.rank() % 2, comm.rank());  // {0, 2}, {1, 3}: no other gossip member
        avg::gosgd scheme(pairs, mine.view(), {.push_probability = 1.0, .seed = 3});
        avg::dpsgd mixing(comm, other.view());  // made before the gossip opens: its split is a collective
        for (int step = 0; step < 8; ++step) scheme.step(no_op, no_op);
        std::vector<double> data(5, comm.rank() + 1.0);
        const std::vector<double> before = data;
        refuses([&] { chorus::allreduce(comm, std::span(data)); }, "allreduce");
        CHECK(data == before);  // nothing was written
        refuses([&] { chorus::broadcast(pairs, std::span(data), 0); }, "broadcast");
        refuses([&] { mixing.step(no_op, no_op); }, "dpsgd step");
        chorus::allreduce(across, std::span(data));  // shares no other member with the gossip: runs
        CHECK(data[0] == (comm.rank() % 2 + 1.0) + (comm.rank() % 2 + 3.0));
        scheme.quiesce();
        chorus::allreduce(comm, std::span(data));  // quiesced: runs
        mixing.step(no_op, no_op);
        for (int step = 0; step < 4; ++step) scheme.step(no_op, no_op);  // open again, then finish() closes it
        scheme.finish();
        chorus::barrier(comm);
        refused.set(comm.rank(), refusals);
      },
      quick());
  for (int count : refused.values) CHECK(count == 3);
}

TEST_CASE("local SGD with H = 1 equals allreduce-SGD bit for bit on the same data") {
  // Dyadic data, a power-of-two learning rate and 4 ranks: every operation
  // of both paths is exact, so any difference in what is averaged, when, or
  // in which order of steps shows as differing bits.
  const int n = 4;
  per_rank<std::vector<float>> by_gradients(n), by_models(n);
  const auto gradient = [](int rank, int step, std::size_t k) {
    return static_cast<float>(static_cast<int>((k * 7 + static_cast<std::size_t>(rank * 13 + step * 5)) % 64) - 32) /
           64.0f;
  };
  const auto run = [&](bool local) {
    return [&, local](communicator& comm) {
      std::vector<float> x(4099), g(4099);
      for (std::size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(k % 16) / 8.0f;
      avg::parameters params{std::span<float>(x)}, grads{std::span<float>(g)};
      avg::sgd optimiser(params, {.learning_rate = 0.25});
      const auto compute = [&](int step) {
        for (std::size_t k = 0; k < g.size(); ++k) g[k] = gradient(comm.rank(), step, k);
      };
      if (local) {
        avg::local_sgd scheme(comm, params, {.period = 1});
        for (int step = 0; step < 5; ++step) scheme.step([&] { compute(step); }, [&] { optimiser.apply(grads); });
        scheme.finish();
        by_models.set(comm.rank(), x);
      } else {
        avg::allreduce_sgd scheme(comm, params, grads);
        for (int step = 0; step < 5; ++step) scheme.step([&] { compute(step); }, [&] { optimiser.apply(grads); });
        by_gradients.set(comm.rank(), x);
      }
    };
  };
  chorus::run_threads(n, run(false), quick());
  chorus::run_threads(n, run(true), quick());
  for (int r = 0; r < n; ++r) {
    const auto& a = by_gradients.values[static_cast<std::size_t>(r)];
    const auto& b = by_models.values[static_cast<std::size_t>(r)];
    REQUIRE(a.size() == b.size());
    CHECK(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
    CHECK(std::memcmp(a.data(), by_gradients.values[0].data(), a.size() * sizeof(float)) == 0);
  }
}

TEST_CASE("synchronous EASGD's centre equals the closed-form update on a quadratic") {
  // f_i(x) = 1/2 ||x - b_i||^2, gradient x - b_i. Serial reference in double:
  //   d_i = x_i - c;  x_i <- x_i - eta (x_i - b_i) - alpha d_i;  c <- c + alpha sum d_i
  const int n = 3, steps = 12, tau = 2;
  const double eta = 0.1, alpha = 0.2;
  const std::size_t size = 33;
  const auto target = [](int rank, std::size_t k) { return static_cast<double>(rank) - 0.05 * static_cast<double>(k); };
  const auto start = [](int rank, std::size_t k) {
    return 0.1 * static_cast<double>(rank * rank) + 0.01 * static_cast<double>(k);
  };
  per_rank<std::vector<float>> centres(n), models(n);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        std::vector<float> x(size), g(size);
        for (std::size_t k = 0; k < size; ++k) x[k] = static_cast<float>(start(comm.rank(), k));
        avg::parameters params{std::span<float>(x)}, grads{std::span<float>(g)};
        avg::sgd optimiser(params, {.learning_rate = eta});
        avg::easgd scheme(comm, params, {.alpha = alpha, .tau = tau});
        for (int step = 0; step < steps; ++step)
          scheme.step(
              [&] {
                for (std::size_t k = 0; k < size; ++k) g[k] = x[k] - static_cast<float>(target(comm.rank(), k));
              },
              [&] { optimiser.apply(grads); });
        centres.set(comm.rank(), std::vector<float>(scheme.centre().begin(), scheme.centre().end()));
        models.set(comm.rank(), x);
        scheme.finish();
        for (std::size_t k = 0; k < size; ++k) CHECK(x[k] == scheme.centre()[k]);
      },
      quick());
  std::vector<std::vector<double>> x(n, std::vector<double>(size));
  std::vector<double> c(size, 0.0);
  for (int r = 0; r < n; ++r)
    for (std::size_t k = 0; k < size; ++k) {
      x[static_cast<std::size_t>(r)][k] = static_cast<float>(start(r, k));
      c[k] += x[static_cast<std::size_t>(r)][k] / n;
    }
  for (int step = 1; step <= steps; ++step) {
    const bool elastic = step % tau == 0;
    std::vector<double> sum(size, 0.0);
    for (int r = 0; r < n; ++r)
      for (std::size_t k = 0; k < size; ++k) {
        double& xi = x[static_cast<std::size_t>(r)][k];
        const double d = xi - c[k];
        xi -= eta * (xi - target(r, k));
        if (elastic) {
          xi -= alpha * d;
          sum[k] += d;
        }
      }
    if (elastic)
      for (std::size_t k = 0; k < size; ++k) c[k] += alpha * sum[k];
  }
  for (int r = 0; r < n; ++r) {
    CHECK(max_gap(centres.values[static_cast<std::size_t>(r)], c) < 1e-5);
    CHECK(max_gap(models.values[static_cast<std::size_t>(r)], x[static_cast<std::size_t>(r)]) < 1e-5);
    CHECK(std::memcmp(centres.values[static_cast<std::size_t>(r)].data(), centres.values[0].data(),
                      size * sizeof(float)) == 0);
  }
}

TEST_CASE("TreeEASGD: every node matches the closed-form elastic updates on a quadratic; the root's model is kept") {
  // f_i(x) = 1/2 ||x - b_i||^2 on a tree of fan-out 2 over 6 ranks (0: 1 2;
  // 1: 3 4; 2: 5). Serial reference in double, in an order each node sees
  // its exchanges in: upward, a node's children (in rank order) then its
  // parent; downward, its parent then its children.
  const int n = 6, steps = 12, fanout = 2;
  const std::uint64_t tau_up = 2, tau_down = 3;
  const double eta = 0.1, alpha = 0.2;
  const std::size_t size = 33;
  const auto target = [](int rank, std::size_t k) { return static_cast<double>(rank) - 0.05 * static_cast<double>(k); };
  const auto start = [](std::size_t k) { return 0.3 + 0.01 * static_cast<double>(k); };
  per_rank<std::vector<float>> before_finish(n), kept(n);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        std::vector<float> x(size), g(size);
        for (std::size_t k = 0; k < size; ++k) x[k] = comm.rank() == 0 ? static_cast<float>(start(k)) : -7.0f;
        avg::parameters params{std::span<float>(x)}, grads{std::span<float>(g)};
        avg::sgd optimiser(params, {.learning_rate = eta});
        avg::tree_easgd scheme(comm, params,
                               {.alpha = alpha, .tau_up = tau_up, .tau_down = tau_down, .fanout = fanout});
        for (int step = 0; step < steps; ++step)
          scheme.step(
              [&] {
                for (std::size_t k = 0; k < size; ++k) g[k] = x[k] - static_cast<float>(target(comm.rank(), k));
              },
              [&] { optimiser.apply(grads); });
        before_finish.set(comm.rank(), x);
        scheme.finish();
        kept.set(comm.rank(), x);
      },
      quick());
  std::vector<std::vector<double>> x(n, std::vector<double>(size));
  for (auto& node : x)
    for (std::size_t k = 0; k < size; ++k) node[k] = static_cast<float>(start(k));  // everyone starts from the root's
  // The asker a sent x_a; d = alpha (x_a - x_b); x_b += d; x_a -= d.
  const auto exchange = [&](int asker, int answerer) {
    for (std::size_t k = 0; k < size; ++k) {
      const double d = alpha * (x[static_cast<std::size_t>(asker)][k] - x[static_cast<std::size_t>(answerer)][k]);
      x[static_cast<std::size_t>(answerer)][k] += d;
      x[static_cast<std::size_t>(asker)][k] -= d;
    }
  };
  std::function<void(int)> up = [&](int node) {
    for (int c = node * fanout + 1; c <= node * fanout + fanout && c < n; ++c) {
      up(c);
      exchange(c, node);
    }
  };
  std::function<void(int)> down = [&](int node) {
    for (int c = node * fanout + 1; c <= node * fanout + fanout && c < n; ++c) {
      exchange(node, c);
      down(c);
    }
  };
  for (int step = 1; step <= steps; ++step) {
    for (int r = 0; r < n; ++r)
      for (std::size_t k = 0; k < size; ++k)
        x[static_cast<std::size_t>(r)][k] -= eta * (x[static_cast<std::size_t>(r)][k] - target(r, k));
    if (step % tau_up == 0) up(0);
    if (step % tau_down == 0) down(0);
  }
  for (int r = 0; r < n; ++r) {
    CAPTURE(r);
    CHECK(max_gap(before_finish.values[static_cast<std::size_t>(r)], x[static_cast<std::size_t>(r)]) < 1e-5);
    CHECK(std::memcmp(kept.values[static_cast<std::size_t>(r)].data(), before_finish.values[0].data(),
                      size * sizeof(float)) == 0);
  }
}

TEST_CASE("asynchronous EASGD conserves sum x_i + c with learning rate 0, with ranks finishing at different times") {
  const int n = 4;
  per_rank<std::vector<float>> models(n), finals(n);
  std::vector<float> centre;
  std::vector<float> start_model;
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        model mine(comm.rank());
        avg::easgd_async scheme(comm, mine.view(), {.alpha = 0.3, .tau = 2, .server = 1});
        if (comm.rank() == 1) start_model = mine.flat();
        // Every rank starts from the server's model; move them apart by known amounts.
        for (auto& tensor : mine.storage)
          for (float& value : tensor) value += 0.5f * static_cast<float>(comm.rank());
        for (int step = 0; step < 6 + 4 * comm.rank(); ++step)
          scheme.step([&] { std::this_thread::sleep_for(std::chrono::microseconds(200 * (n - comm.rank()))); }, no_op);
        comm.barrier();  // every pull is a finished round trip: nothing in flight
        models.set(comm.rank(), mine.flat());
        if (scheme.is_server()) centre.assign(scheme.centre().begin(), scheme.centre().end());
        comm.barrier();
        scheme.finish();
        finals.set(comm.rank(), mine.flat());
        CHECK(scheme.stats().exchanges == static_cast<std::uint64_t>((6 + 4 * comm.rank()) / 2));
      },
      quick());
  // Initially: x_i = s + 0.5 i and c = s, so sum x_i + c = (n + 1) s + 0.5 * (0 + 1 + ... + n-1).
  double worst = 0;
  for (std::size_t k = 0; k < start_model.size(); ++k) {
    double total = centre[k];
    for (const auto& x : models.values) total += x[k];
    const double expected = (n + 1) * static_cast<double>(start_model[k]) + 0.5 * n * (n - 1) / 2.0;
    worst = std::max(worst, std::fabs(total - expected));
  }
  CHECK(worst < 1e-5);
  for (const auto& x : finals.values) CHECK(std::memcmp(x.data(), centre.data(), centre.size() * sizeof(float)) == 0);
  for (const auto& x : finals.values)
    CHECK(std::memcmp(x.data(), finals.values[0].data(), x.size() * sizeof(float)) == 0);
}

namespace {

// A consistent least-squares problem split over the ranks: rank i holds
// rows A_i (too few to pin x* down alone), b_i = A_i x*. Loss of a model is
// 1/(2N) sum_i ||A_i x - b_i||^2 over all rows, which is 0 at x*.
struct least_squares {
  static constexpr std::size_t dim = 10, rows_per_rank = 8;
  int ranks;
  std::vector<std::vector<float>> a;  // per rank, row-major rows_per_rank x dim
  std::vector<std::vector<float>> b;
  explicit least_squares(int n) : ranks(n) {
    std::vector<float> solution(dim);
    for (std::size_t k = 0; k < dim; ++k) solution[k] = std::cos(static_cast<float>(k));
    unsigned state = 12345;
    const auto next = [&] {
      state = state * 1103515245u + 12345u;
      return static_cast<float>((state >> 8) % 2001) / 1000.0f - 1.0f;
    };
    for (int r = 0; r < n; ++r) {
      a.emplace_back(rows_per_rank * dim);
      b.emplace_back(rows_per_rank, 0.0f);
      for (std::size_t row = 0; row < rows_per_rank; ++row)
        for (std::size_t k = 0; k < dim; ++k) {
          const float value = next() * 0.55f;
          a.back()[row * dim + k] = value;
          b.back()[row] += value * solution[k];
        }
    }
  }
  void gradient(int rank, std::span<const float> x, std::span<float> g) const {
    std::fill(g.begin(), g.end(), 0.0f);
    for (std::size_t row = 0; row < rows_per_rank; ++row) {
      const float* r = a[static_cast<std::size_t>(rank)].data() + row * dim;
      float residual = -b[static_cast<std::size_t>(rank)][row];
      for (std::size_t k = 0; k < dim; ++k) residual += r[k] * x[k];
      for (std::size_t k = 0; k < dim; ++k) g[k] += residual * r[k] / static_cast<float>(rows_per_rank);
    }
  }
  double loss(std::span<const float> x) const {
    double total = 0;
    for (int rank = 0; rank < ranks; ++rank)
      for (std::size_t row = 0; row < rows_per_rank; ++row) {
        double residual = -b[static_cast<std::size_t>(rank)][row];
        for (std::size_t k = 0; k < dim; ++k) residual += a[static_cast<std::size_t>(rank)][row * dim + k] * x[k];
        total += residual * residual;
      }
    return total / (2.0 * ranks * rows_per_rank);
  }
};

// Trains with `make_scheme(comm, params, grads)` for `steps` local steps (rank
// r takes 5 r more when `uneven`, for the asynchronous schemes) from x = 0 and returns the loss of each rank's kept model after finish().
template <class MakeScheme>
std::vector<double> train_least_squares(int n, int steps, double rate, MakeScheme make_scheme, bool nesterov = false,
                                        bool uneven = false) {
  // Each step "computes" for a while, as a trainer does: with none, gossip
  // pushes pile up faster than they are merged and GoSGD mixes stale models.
  constexpr auto compute_time = std::chrono::microseconds(200);
  const least_squares problem(n);
  per_rank<double> losses(n);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        std::vector<float> x(least_squares::dim, 0.0f), g(least_squares::dim);
        avg::parameters params{std::span<float>(x)}, grads{std::span<float>(g)};
        avg::sgd optimiser(params, {.learning_rate = rate, .momentum = nesterov ? 0.5 : 0.0, .nesterov = nesterov});
        auto scheme = make_scheme(comm, params, grads);
        for (int step = 0; step < steps + (uneven ? 5 * comm.rank() : 0);
             ++step)  // async: ranks finish at different times
          scheme.step(
              [&] {
                problem.gradient(comm.rank(), x, g);
                std::this_thread::sleep_for(compute_time);
              },
              [&] { optimiser.apply(grads); });
        scheme.finish();
        losses.set(comm.rank(), problem.loss(x));
      },
      quick());
  return losses.values;
}

}  // namespace

TEST_CASE("every scheme converges on a small least-squares problem (loss below 1e-4 of the start)") {
  const int n = 3, steps = 600;
  const double rate = 0.5;
  const double start = least_squares(n).loss(std::vector<float>(least_squares::dim, 0.0f));
  const double bound = 1e-4 * start;
  const auto check = [&](const std::string& name, const std::vector<double>& losses) {
    CAPTURE(name);
    for (double loss : losses) CHECK(loss < bound);
  };
  check("allreduce_sgd", train_least_squares(n, steps, rate, [](communicator& c, avg::parameters p, avg::parameters g) {
          return avg::allreduce_sgd(c, p, g);
        }));
  check("allreduce_sgd topk 0.3, error feedback",
        train_least_squares(n, steps, rate, [](communicator& c, avg::parameters p, avg::parameters g) {
          return avg::allreduce_sgd(c, p, g, {.codec = chorus::codec::by_name("topk:0.3")});
        }));
  check("allreduce_sgd randomk 0.5, error feedback",
        train_least_squares(n, steps, rate * 0.5, [](communicator& c, avg::parameters p, avg::parameters g) {
          return avg::allreduce_sgd(c, p, g, {.codec = chorus::codec::by_name("randomk:0.5")});
        }));
  check("local_sgd H=4", train_least_squares(n, steps, rate, [](communicator& c, avg::parameters p, avg::parameters) {
          return avg::local_sgd(c, p, {.period = 4, .warmup_steps = 10});
        }));
  check("dpsgd ring", train_least_squares(n, steps, rate, [](communicator& c, avg::parameters p, avg::parameters) {
          return avg::dpsgd(c, p);
        }));
  check("dpsgd fp16", train_least_squares(n, steps, rate, [](communicator& c, avg::parameters p, avg::parameters) {
          return avg::dpsgd(c, p, {.codec = chorus::codec::by_name("fp16")});
        }));
  check("easgd", train_least_squares(n, steps, rate, [](communicator& c, avg::parameters p, avg::parameters) {
          return avg::easgd(c, p, {.alpha = 0.2, .tau = 1});
        }));
  check("eamsgd", train_least_squares(
                      n, steps, rate * 0.5,
                      [](communicator& c, avg::parameters p, avg::parameters) {
                        return avg::easgd(c, p, {.alpha = 0.2, .tau = 2});
                      },
                      true));
  check("easgd_async", train_least_squares(
                           n, steps, rate,
                           [](communicator& c, avg::parameters p, avg::parameters) {
                             return avg::easgd_async(c, p, {.alpha = 0.2, .tau = 1});
                           },
                           false, true));
  check("gosgd", train_least_squares(
                     n, steps, rate,
                     [](communicator& c, avg::parameters p, avg::parameters) {
                       return avg::gosgd(c, p, {.push_probability = 1.0});
                     },
                     false, true));
  check("gosgd even", train_least_squares(n, steps, rate, [](communicator& c, avg::parameters p, avg::parameters) {
          return avg::gosgd(c, p, {.push_probability = 1.0});
        }));
  check("tree_easgd", train_least_squares(n, steps, rate, [](communicator& c, avg::parameters p, avg::parameters) {
          return avg::tree_easgd(c, p, {.alpha = 0.2, .tau_up = 1, .tau_down = 2, .fanout = 2});
        }));
  using avg::consistency;
  check("ps bsp", train_least_squares(n, steps, rate, [&](communicator& c, avg::parameters p, avg::parameters g) {
          return avg::parameter_server(c, p, g, {.optimiser = {.learning_rate = rate}});
        }));
  check("ps bsp, a dedicated server",
        train_least_squares(n, steps, rate, [&](communicator& c, avg::parameters p, avg::parameters g) {
          return avg::parameter_server(c, p, g, {.dedicated_servers = 1, .optimiser = {.learning_rate = rate}});
        }));
  check("ps ssp", train_least_squares(
                      n, steps, rate,
                      [&](communicator& c, avg::parameters p, avg::parameters g) {
                        return avg::parameter_server(
                            c, p, g, {.mode = consistency::ssp, .staleness = 3, .optimiser = {.learning_rate = rate}});
                      },
                      false, true));
  // Downpour's staleness is unbounded: under a heavily loaded scheduler a
  // worker may take many steps between the fetches it applies (4.8e-5 of
  // the start after 600 steps was seen with two busy loops and a build
  // beside it), so it gets twice the steps.
  check("ps downpour", train_least_squares(
                           n, 2 * steps, rate,
                           [&](communicator& c, avg::parameters p, avg::parameters g) {
                             return avg::parameter_server(c, p, g,
                                                          {.mode = consistency::downpour,
                                                           .push_every = 2,
                                                           .fetch_every = 3,
                                                           .optimiser = {.learning_rate = rate}});
                           },
                           false, true));
}

TEST_CASE("schemes reject bad options with clear errors") {
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        std::vector<float> x(5);
        avg::parameters params{std::span<float>(x)};
        using chorus::errc;
        chorus_test::expect_error([&] { avg::local_sgd(comm, params, {.period = 0}); }, errc::invalid_argument,
                                  "period H");
        chorus_test::expect_error([&] { avg::easgd(comm, params, {.alpha = 1.5}); }, errc::invalid_argument,
                                  "alpha must be in (0, 1)");
        chorus_test::expect_error([&] { avg::dpsgd(comm, params, {.topology = avg::topology::ring(4)}); },
                                  errc::invalid_argument, "has 4 ranks, the communicator 3");
        chorus_test::expect_error([&] { avg::gosgd(comm, params, {.push_probability = 2.0}); }, errc::invalid_argument,
                                  "push probability");
        const auto top = chorus::codec::by_name("topk:0.1");
        chorus_test::expect_error([&] { avg::dpsgd(comm, params, {.codec = top}); }, errc::invalid_argument,
                                  "sparse codecs compress gradients");
        chorus_test::expect_error([&] { avg::gosgd(comm, params, {.codec = top}); }, errc::invalid_argument,
                                  "gosgd sends models, and topk would drop");
        chorus_test::expect_error([&] { avg::local_sgd(comm, params, {.codec = top}); }, errc::invalid_argument,
                                  "local_sgd");
        chorus_test::expect_error([&] { avg::tree_easgd(comm, params, {.fanout = 0}); }, errc::invalid_argument,
                                  "fan-out must be at least 1");
        chorus_test::expect_error([&] { avg::tree_easgd(comm, params, {.tau_down = 0}); }, errc::invalid_argument,
                                  "tau must be at least 1");
        std::vector<float> g(4);
        chorus_test::expect_error([&] { avg::allreduce_sgd(comm, params, avg::parameters{std::span<float>(g)}); },
                                  errc::invalid_argument, "do not match");
      },
      quick());
}

TEST_CASE("wire: every asynchronous scheme's header is checked (kind, payload size, sequence)") {
  namespace wire = avg::wire;
  const wire::reader from{3, 5, "test merge"};
  wire::message out(16), in(16);
  std::memcpy(out.payload().data(), "0123456789abcdef", 16);
  const auto sent = out.write(wire::kind::push, 7, 0.25, 16);
  CHECK(sent.size() == sizeof(wire::header) + 16);
  std::memcpy(in.buffer().data(), sent.data(), sent.size());
  const wire::header head = in.read(sent.size(), {wire::kind::push, wire::kind::cut}, 16, from);
  CHECK(head.what == wire::kind::push);
  CHECK(head.sequence == 7);
  CHECK(head.value == 0.25);
  CHECK(std::memcmp(in.payload().data(), "0123456789abcdef", 16) == 0);
  wire::expect_sequence(head, 7, from);

  using chorus::errc;
  using chorus_test::expect_error;
  expect_error([&] { wire::expect_sequence(head, 6, from); }, errc::mismatch, "push 7 arrived where 6 was due");
  expect_error([&] { in.read(sent.size(), {wire::kind::pull}, 16, from); }, errc::mismatch, "kind 1 (push)");
  expect_error([&] { in.read(sent.size(), {wire::kind::push}, 12, from); }, errc::mismatch,
               "carries 16 payload bytes where 12 were due");
  expect_error([&] { in.read(sent.size() - 4, {wire::kind::push}, 16, from); }, errc::mismatch,
               "declares 16 payload bytes and carries 12");
  expect_error([&] { in.read(20, {wire::kind::push}, 16, from); }, errc::mismatch, "shorter than its header");
  expect_error([&] { out.write(wire::kind::push, 8, 0.0, 17); }, errc::invalid_argument, "does not fit");
  const auto cut = out.write(wire::kind::cut, 9, 0.0, 0);
  std::memcpy(in.buffer().data(), cut.data(), cut.size());
  CHECK(in.read(cut.size(), {wire::kind::push, wire::kind::cut}, 16, from).sequence == 9);  // a cut carries nothing
  try {
    wire::expect_sequence(head, 1, from);
  } catch (const chorus::error& failure) {
    CHECK(failure.rank() == 3);
    CHECK(failure.peer() == 5);
    CHECK(failure.operation() == "test merge");
  }
}

// The one waiting primitive (comm.progress_until), in every progress mode:
// a GoSGD peer that never quiesces and an async-EASGD worker that never says
// goodbye are timeout errors naming them, after the timeout and not long
// after; the silent rank stays alive meanwhile.
TEST_CASE("schemes wait through comm.progress_until: a silent peer is a timeout naming it, in every progress mode") {
  for (const auto mode : {chorus::transport::progress_mode::spin, chorus::transport::progress_mode::yield,
                          chorus::transport::progress_mode::block}) {
    CAPTURE(chorus::transport::to_string(mode));
    chorus::options options = quick(400ms);
    options.progress = mode;
    std::mutex mutex;
    std::vector<std::string> failures;
    const auto expect_timeout = [&](const std::function<void()>& body, int rank, int peer,
                                    const std::string& operation) {
      const auto start = std::chrono::steady_clock::now();
      std::string problem;
      try {
        body();
        problem = "no error";
      } catch (const chorus::error& failure) {
        const auto waited = std::chrono::steady_clock::now() - start;
        if (failure.category() != chorus::errc::timeout || failure.peer() != peer ||
            failure.operation().find(operation) != 0 || waited < 400ms || waited > 30s)
          problem = std::string(failure.what()) + " after " +
                    std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(waited).count()) + " ms";
      }
      if (!problem.empty()) {
        std::lock_guard lock(mutex);
        failures.push_back("rank " + std::to_string(rank) + ": " + problem);
      }
    };
    // The silent rank stays alive until the others have their error (a rank
    // that left would be a peer_failure, not a timeout), however slowly a
    // loaded machine gets them there.
    std::atomic<int> answered{0};
    const auto stay_until_answered = [&](int expected) {
      const auto cap = std::chrono::steady_clock::now() + 60s;
      while (answered.load() < expected && std::chrono::steady_clock::now() < cap) std::this_thread::sleep_for(10ms);
    };
    chorus::run_threads(
        3,
        [&](communicator& comm) {
          model mine(comm.rank());
          avg::gosgd gossip(comm, mine.view(), {.push_probability = 0.0});
          if (comm.rank() == 2) return stay_until_answered(2);  // alive, never quiesces
          expect_timeout([&] { gossip.quiesce(); }, comm.rank(), 2, "gosgd quiesce");
          ++answered;
          stay_until_answered(2);  // nor leave before the other has its timeout
        },
        options);
    answered = 0;
    chorus::run_threads(
        3,
        [&](communicator& comm) {
          model mine(comm.rank());
          avg::easgd_async elastic(comm, mine.view(), {.alpha = 0.1, .tau = 1, .server = 0});
          if (comm.rank() == 0) {
            expect_timeout([&] { elastic.finish(); }, 0, -1, "easgd_async finish");
            ++answered;
          } else if (comm.rank() == 1) {
            stay_until_answered(1);  // alive, never finishes
          } else {
            elastic.step([] {}, [] {});
            try {
              elastic.finish();  // its goodbye is served; then the broadcast fails with the server
            } catch (const chorus::error&) {}
          }
        },
        options);
    for (const auto& failure : failures) MESSAGE(failure);
    CHECK(failures.empty());
  }
}

TEST_CASE("a server's roster: joiners admitted, goodbyes and drops counted once, indices kept") {
  avg::worker_roster roster({1, 2, 4});
  CHECK(roster.size() == 3);
  CHECK(roster.sending_count() == 3);
  CHECK(roster.index_of(4) == 2);
  CHECK(roster.index_of(0) == roster.size());  // the server itself is none of its workers

  const std::size_t joiner = roster.admit(5);
  CHECK(joiner == 3);
  CHECK(roster.at(joiner) == avg::standing::admitting);
  CHECK(roster.sending_count() == 4);
  roster.heard_from(joiner);
  CHECK(roster.at(joiner) == avg::standing::live);

  roster.said_goodbye(0, false);  // done: it takes the result
  roster.said_goodbye(1, true);   // leaving: it does not
  CHECK(roster.at(0) == avg::standing::finished);
  CHECK(roster.at(1) == avg::standing::departed);
  CHECK(roster.sending_count() == 2);

  CHECK(roster.drop(4));
  CHECK_FALSE(roster.drop(4));  // dropped once
  CHECK_FALSE(roster.drop(7));  // not a worker
  CHECK(roster.sending_count() == 1);
  CHECK(roster.drop(2));  // rank 2, the leaver (index 1), dead after its goodbye: lost, counted once
  CHECK(roster.at(1) == avg::standing::lost);
  CHECK(roster.at(0) == avg::standing::finished);
  CHECK(roster.sending_count() == 1);
  CHECK(roster.sending(joiner));
  CHECK_FALSE(roster.sending(2));
}
