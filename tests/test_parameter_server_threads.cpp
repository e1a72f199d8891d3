// The parameter server over the real UCX transport, ranks as threads: BSP
// against allreduce-SGD bit for bit, SSP's staleness bound seen in the
// pulled models, Downpour applying every push once (fetching by pull or by
// a window get), both layouts, and
// clear errors for bad options.
#include <chorus/chorus.hpp>

#include "expect_error.hpp"
#include "support.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using chorus::communicator;
using chorus_test::quick;
namespace avg = chorus::averaging;

namespace {

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

// Dyadic gradients with few significant bits: with a power-of-two rate every
// sum and step below is exact, so two paths agree bit for bit or not at all.
float dyadic_gradient(int worker, int step, std::size_t k) {
  return static_cast<float>(static_cast<int>((k * 7 + static_cast<std::size_t>(worker * 13 + step * 5)) % 64) - 32) /
         64.0f;
}

std::vector<float> dyadic_start(std::size_t size) {
  std::vector<float> x(size);
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(k % 16) / 8.0f;
  return x;
}

// Trains `steps` steps of dyadic gradients; the trainer's own step is the
// optimiser (allreduce-SGD) or nothing (the parameter server's is on the server).
std::vector<std::vector<float>> bsp_or_allreduce(int ranks, int servers, bool server_side, int steps) {
  const avg::sgd_options optimiser{.learning_rate = 0.25, .momentum = 0.5};
  per_rank<std::vector<float>> models(ranks);
  chorus::run_threads(
      ranks,
      [&](communicator& comm) {
        std::vector<float> x = dyadic_start(4099), g(x.size());
        avg::parameters params{std::span<float>(x)}, grads{std::span<float>(g)};
        const int worker = comm.rank() - servers;
        const auto compute = [&](int step) {
          for (std::size_t k = 0; k < g.size(); ++k) g[k] = dyadic_gradient(worker, step, k);
        };
        if (server_side) {
          avg::parameter_server ps(comm, params, grads, {.dedicated_servers = servers, .optimiser = optimiser});
          if (ps.is_worker())
            for (int step = 0; step < steps; ++step) ps.step([&] { compute(step); }, [] {});
          ps.finish();
        } else {
          avg::sgd local(params, optimiser);
          avg::allreduce_sgd scheme(comm, params, grads);
          for (int step = 0; step < steps; ++step) scheme.step([&] { compute(step); }, [&] { local.apply(grads); });
        }
        models.set(comm.rank(), x);
      },
      quick());
  return models.values;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("BSP with SGD (momentum too) equals allreduce-SGD bit for bit on dyadic data, in both layouts") {
  const int workers = 4, steps = 5;
  const auto reference = bsp_or_allreduce(workers, 0, false, steps);
  for (int r = 1; r < workers; ++r) REQUIRE(same_bits(reference[static_cast<std::size_t>(r)], reference[0]));
  for (int servers : {0, 1, 3}) {
    CAPTURE(servers);
    const auto served = bsp_or_allreduce(workers + servers, servers, true, steps);
    for (const auto& model : served) CHECK(same_bits(model, reference[0]));  // dedicated servers hold it too
  }
}

namespace {

// Worker w's gradient is 1 on its own block of the model and 0 elsewhere, so
// block v of any model says how many of worker v's pushes it holds:
// x0 - pushes * rate / W (rate / W = 1/8, exact).
constexpr std::size_t block = 5;
constexpr double rate = 0.5;

std::size_t pushes_held(const std::vector<float>& x, int worker, int workers) {
  const float moved = 1.0f - x[static_cast<std::size_t>(worker) * block];
  return static_cast<std::size_t>(std::lround(moved / (rate / workers)));
}

}  // namespace

TEST_CASE("SSP: every pull holds all of the worker's own pushes and every other worker's first clock - s") {
  const int n = 4;
  const std::uint64_t s = 2;
  const int steps = 24;
  per_rank<std::vector<std::string>> violations(n);
  per_rank<avg::shard_stats> shards(n);
  per_rank<double> waited(n);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        // 4 blocks of 5 and 3 more elements: shards do not follow the blocks.
        std::vector<float> x(n * block + 3, 1.0f), g(x.size(), 0.0f);
        for (std::size_t k = 0; k < block; ++k) g[static_cast<std::size_t>(comm.rank()) * block + k] = 1.0f;
        avg::parameters params{std::span<float>(x)}, grads{std::span<float>(g)};
        avg::parameter_server ps(comm, params, grads,
                                 {.mode = avg::consistency::ssp, .staleness = s, .optimiser = {.learning_rate = rate}});
        std::vector<std::string> wrong;
        for (int step = 1; step <= steps; ++step) {
          if (comm.rank() == n - 1) std::this_thread::sleep_for(3ms);  // the slow worker
          ps.step([] {}, [] {});
          for (int v = 0; v < n; ++v) {
            const std::size_t held = pushes_held(x, v, n);
            const bool own = v == comm.rank();
            if (own ? held != static_cast<std::size_t>(step) : held + s < static_cast<std::size_t>(step))
              wrong.push_back("step " + std::to_string(step) + ": worker " + std::to_string(v) + "'s pushes held " +
                              std::to_string(held));
          }
        }
        ps.finish();
        violations.set(comm.rank(), wrong);
        shards.set(comm.rank(), ps.server_stats());
        waited.set(comm.rank(), ps.worker_stats().waited_seconds);
        for (int v = 0; v < n; ++v)
          CHECK(pushes_held(x, v, n) == static_cast<std::size_t>(steps));  // all of them, at the end
      },
      quick());
  std::uint64_t gap = 0, applied = 0;
  for (int r = 0; r < n; ++r) {
    for (const auto& v : violations.values[static_cast<std::size_t>(r)]) MESSAGE("rank " << r << ": " << v);
    CHECK(violations.values[static_cast<std::size_t>(r)].empty());
    gap = std::max(gap, shards.values[static_cast<std::size_t>(r)].clock_gap_max);
    applied += shards.values[static_cast<std::size_t>(r)].gradients_applied;
  }
  CHECK(gap == s);                                 // the bound held, and the fast workers did reach it
  CHECK(applied == std::uint64_t{n} * n * steps);  // every push at every shard
  CHECK(waited.values[0] > 0.0);                   // a fast worker waited for the slow one
}

TEST_CASE("Downpour applies every pushed gradient exactly once, the unpushed rest at finish(), without waiting") {
  for (bool by_accumulate : {false, true}) {  // pushes as messages; as window accumulates
    CAPTURE(by_accumulate);
    const int n = 3;
    per_rank<avg::shard_stats> shards(n);
    chorus::run_threads(
        n,
        [&](communicator& comm) {
          std::vector<float> x(n * block + 1, 1.0f), g(x.size(), 0.0f);
          for (std::size_t k = 0; k < block; ++k) g[static_cast<std::size_t>(comm.rank()) * block + k] = 1.0f;
          avg::parameters params{std::span<float>(x)}, grads{std::span<float>(g)};
          avg::parameter_server ps(comm, params, grads,
                                   {.mode = avg::consistency::downpour,
                                    .push_every = 3,
                                    .fetch_every = 2,
                                    .optimiser = {.learning_rate = rate},
                                    .push_by_accumulate = by_accumulate});
          const int steps = 10 + 3 * comm.rank();  // 10, 13, 16: not multiples of 3
          for (int step = 0; step < steps; ++step) ps.step([] {}, [] {});
          ps.finish();
          for (int v = 0; v < n; ++v) CHECK(pushes_held(x, v, n) == static_cast<std::size_t>(10 + 3 * v));
          CHECK(ps.worker_stats().waited_seconds == 0.0);
          CHECK(ps.worker_stats().fetches_applied >= 1);
          shards.set(comm.rank(), ps.server_stats());
        },
        quick());
    std::uint64_t applied = 0;
    for (const auto& stats : shards.values) applied += stats.gradients_applied;
    CHECK(applied == 3u * (4 + 5 + 6));  // ceil(steps / 3) pushes per worker, at each of 3 shards
  }
}

TEST_CASE("Downpour fetching by window get: each fetch a published state, never older, every push once at the end") {
  for (int servers : {0, 1})                    // a shard on every rank; one dedicated server
    for (bool by_accumulate : {false, true}) {  // pushes as messages; as window accumulates
      CAPTURE(servers);
      CAPTURE(by_accumulate);
      const int workers = 4, n = workers + servers;  // rate / W = 1/8: every value exact
      per_rank<std::vector<std::string>> violations(n);
      std::vector<std::atomic<int>> steps_taken(static_cast<std::size_t>(workers));
      chorus::run_threads(
          n,
          [&](communicator& comm) {
            const int worker = comm.rank() - servers;
            std::vector<float> x(static_cast<std::size_t>(workers) * block + 2, 1.0f), g(x.size(), 0.0f);
            if (worker >= 0)
              for (std::size_t k = 0; k < block; ++k) g[static_cast<std::size_t>(worker) * block + k] = 1.0f;
            avg::parameters params{std::span<float>(x)}, grads{std::span<float>(g)};
            avg::parameter_server ps(comm, params, grads,
                                     {.mode = avg::consistency::downpour,
                                      .dedicated_servers = servers,
                                      .optimiser = {.learning_rate = rate},
                                      .fetch_by_get = true,
                                      .push_by_accumulate = by_accumulate});
            std::vector<std::string> wrong;
            std::vector<std::size_t> last(static_cast<std::size_t>(workers), 0);
            // At least 12 + 3w steps, then on (1 ms apart) until a fetch holds
            // one of its own pushes: what the servers publish reaches the gets.
            int step = 0;
            for (bool own_seen = false; ps.is_worker() && (step < 12 + 3 * worker || !own_seen);) {
              if (++step > 12 + 3 * worker) std::this_thread::sleep_for(1ms);
              if (step > 20000) {
                wrong.push_back("no fetch held one of its own pushes");
                break;
              }
              ps.step([] {}, [] {});
              // Every element is 1 - k rate / W for a whole k (no torn float),
              // and no worker's count goes back (versions only grow).
              for (std::size_t k = 0; k < x.size(); ++k) {
                const double held = (1.0 - static_cast<double>(x[k])) / (rate / workers);
                const bool untouched = k >= static_cast<std::size_t>(workers) * block;  // no worker's block
                if (held != std::round(held) || held < 0 || (untouched && held != 0))
                  wrong.push_back("element " + std::to_string(k) + " is " + std::to_string(x[k]));
              }
              for (int v = 0; v < workers; ++v) {
                const std::size_t held = pushes_held(x, v, workers);
                if (held < last[static_cast<std::size_t>(v)])
                  wrong.push_back("step " + std::to_string(step) + ": worker " + std::to_string(v) +
                                  "'s pushes went from " + std::to_string(last[static_cast<std::size_t>(v)]) + " to " +
                                  std::to_string(held));
                last[static_cast<std::size_t>(v)] = held;
              }
              own_seen = pushes_held(x, worker, workers) > 0;
            }
            if (ps.is_worker()) steps_taken[static_cast<std::size_t>(worker)] = step;
            ps.finish();  // after every worker's goodbye: every count is in
            for (int v = 0; v < workers; ++v)
              CHECK(pushes_held(x, v, workers) == static_cast<std::size_t>(steps_taken[static_cast<std::size_t>(v)]));
            if (ps.is_worker()) {
              CHECK(ps.worker_stats().waited_seconds == 0.0);
              CHECK(ps.worker_stats().fetches_applied == static_cast<std::uint64_t>(step));
            }
            violations.set(comm.rank(), wrong);
          },
          quick());
      for (int r = 0; r < n; ++r) {
        for (const auto& v : violations.values[static_cast<std::size_t>(r)]) MESSAGE("rank " << r << ": " << v);
        CHECK(violations.values[static_cast<std::size_t>(r)].empty());
      }
    }
}

TEST_CASE("parameter server: every shard size, rank 0's start, and bad options rejected clearly") {
  for (std::size_t size : {0u, 1u, 2u, 7u}) {
    CAPTURE(size);
    chorus::run_threads(
        3,
        [&](communicator& comm) {
          std::vector<float> x(size, static_cast<float>(comm.rank() + 1)), g(size, 1.0f);
          avg::parameters params{std::span<float>(x)}, grads{std::span<float>(g)};
          avg::parameter_server ps(comm, params, grads, {.optimiser = {.learning_rate = 0.5}});
          for (float value : x) CHECK(value == 1.0f);  // rank 0's model
          ps.step([] {}, [] {});
          ps.finish();
          for (float value : x) CHECK(value == 0.5f);  // 1 - 0.5 * mean(1, 1, 1)
        },
        quick());
  }
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        std::vector<float> x(5), g(5), h(4);
        avg::parameters params{std::span<float>(x)}, grads{std::span<float>(g)};
        using chorus::errc;
        chorus_test::expect_error([&] { avg::parameter_server(comm, params, grads, {.dedicated_servers = 3}); },
                                  errc::invalid_argument, "leave no worker among 3 ranks");
        chorus_test::expect_error([&] { avg::parameter_server(comm, params, grads, {.push_every = 2}); },
                                  errc::invalid_argument, "are Downpour's");
        chorus_test::expect_error([&] { avg::parameter_server(comm, params, grads, {.fetch_by_get = true}); },
                                  errc::invalid_argument, "fetch_by_get is Downpour's");
        chorus_test::expect_error(
            [&] {
              avg::parameter_server(comm, params, grads, {.mode = avg::consistency::ssp, .push_by_accumulate = true});
            },
            errc::invalid_argument, "push_by_accumulate is Downpour's");
        chorus_test::expect_error(
            [&] { avg::parameter_server(comm, params, grads, {.mode = avg::consistency::downpour, .fetch_every = 0}); },
            errc::invalid_argument, "at least 1");
        chorus_test::expect_error([&] { avg::parameter_server(comm, params, avg::parameters{std::span<float>(h)}); },
                                  errc::invalid_argument, "do not match");
      },
      quick());
}
