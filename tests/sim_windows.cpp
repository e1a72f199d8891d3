// Tensor windows and the schemes on them over the simulated transport's
// one-sided memory (transport/simgrid_transport.hpp): peers on another
// simulated host are reached by simulated transfers, peers on the same host
// through mapped memory. Two jobs on a star of 1 Gbit/s hosts (5 ranks on
// 5 hosts: every neighbour remote; 6 ranks on hosts of 3, 2 and 1: both
// kinds), sizes 0, 1, 7 and 1001, each case against a closed form: a put
// then a weighted update, accumulates (blocking and not) summed exactly
// once each, a get of published tensors, int8 accumulates against a serial
// error-feedback encoder, the one-sided gossip's invariants (sum p = n, the
// p-weighted mean kept, finish() at the mean), and Downpour fetching by
// window get (each fetch a published state, every push once). Prints each
// case's result and the simulated time; exits 1 on any wrong element.
#include <chorus/averaging/one_sided_gossip.hpp>
#include <chorus/averaging/parameter_server.hpp>
#include <chorus/codec/any_error_feedback.hpp>
#include <chorus/sim/platform.hpp>
#include <chorus/sim/run.hpp>
#include <chorus/window/window.hpp>

#include "window_values.hpp"

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

using chorus::neighbour_weight;
using chorus::sim::communicator;
using chorus_test::ring_sources;
using chorus_test::value_of;
using chorus_test::values_of;

namespace {

const std::vector<std::size_t> sizes = {0, 1, 7, 1001};

// Wrong elements by case, over every job (ranks are coroutines on one
// thread: no lock).
std::map<std::string, std::size_t> wrong;
void expect_close(const std::string& what, double got, double expected, double tolerance = 1e-5) {
  wrong[what] += std::fabs(got - expected) > tolerance * (1.0 + std::fabs(expected)) ? 1 : 0;
}

// Each rank puts x with weight 1/2 + t/8 to target t, then updates with
// self weight 1/2 and 1/4 + s/16 from source s.
void put_then_update(communicator& comm, std::size_t size) {
  const int me = comm.rank();
  std::vector<float> x = values_of(me, 0, size);
  chorus::window win(comm, x, {.sources = ring_sources(me, comm.size())});
  std::vector<neighbour_weight> to, from;
  for (int target : win.targets()) to.push_back({target, 0.5 + 0.125 * target});
  for (int source : win.sources()) from.push_back({source, 0.25 + 0.0625 * source});
  win.put(x, to);
  win.wait_versions(1);
  win.update(x, 0.5, from);
  for (std::size_t k = 0; k < size; ++k) {
    double expected = 0.5 * value_of(me, 0, k);
    for (int source : win.sources())
      expected +=
          (0.25 + 0.0625 * source) * static_cast<double>(static_cast<float>(0.5 + 0.125 * me) * value_of(source, 0, k));
    expect_close("put then update", x[k], expected);
  }
  win.free();
}

// Four rounds of accumulates into every other rank, two of them
// non-blocking: each slot holds its source's sum, p = 4; reset leaves zeros.
void accumulates(communicator& comm, std::size_t size) {
  const int me = comm.rank();
  chorus::window win(comm, std::vector<float>(size));
  for (int round = 0; round < 4; ++round) {
    const std::vector<float> values = values_of(me, round, size);
    if (round % 2 == 0)
      win.accumulate(values);
    else
      (void)win.accumulate_nonblocking(values);
  }
  win.quiesce();
  win.collect(
      [&](int source, std::span<const float> value, double p) {
        expect_close("accumulates", p, 4.0, 1e-12);
        for (std::size_t k = 0; k < size; ++k) {
          double expected = 0;
          for (int round = 0; round < 4; ++round) expected += value_of(source, round, k);
          expect_close("accumulates", value[k], expected);
        }
      },
      true);
  win.collect([&](int, std::span<const float> value, double p) {
    wrong["accumulates"] += p != 0.0 ? 1 : 0;
    for (float v : value) wrong["accumulates"] += v != 0.0f ? 1 : 0;
  });
  win.free();
}

// Gets of the tensors published at creation, then of newer ones with p = 2
// read at weight 1/2.
void gets(communicator& comm, std::size_t size) {
  const int me = comm.rank();
  chorus::window win(comm, values_of(me, 0, size), {.sources = ring_sources(me, comm.size())});
  win.get();
  win.collect([&](int source, std::span<const float> value, double p) {
    expect_close("get", p, 1.0, 0.0);
    for (std::size_t k = 0; k < size; ++k) expect_close("get", value[k], value_of(source, 0, k), 0.0);
  });
  comm.barrier();
  win.set_p(2.0);
  win.publish(values_of(me, 7, size));
  comm.barrier();
  std::vector<neighbour_weight> from;
  for (int source : win.sources()) from.push_back({source, 0.5});
  win.get(from);
  win.collect([&](int source, std::span<const float> value, double p) {
    expect_close("get", p, 1.0, 0.0);
    for (std::size_t k = 0; k < size; ++k) expect_close("get", value[k], 0.5f * value_of(source, 7, k), 0.0);
  });
  win.free();
}

// int8 accumulates with error feedback: each slot holds the sum of what a
// serial encoder with its own residual decodes, round after round.
void int8_accumulates(communicator& comm, std::size_t size) {
  const chorus::codec::any_codec int8 = chorus::codec::by_name("int8");
  const int me = comm.rank();
  chorus::window win(comm, std::vector<float>(size), {.sources = ring_sources(me, comm.size()), .codec = int8});
  for (int round = 0; round < 3; ++round) {
    win.accumulate(values_of(me, round, size));
    win.quiesce();
  }
  win.collect([&](int source, std::span<const float> value, double) {
    chorus::codec::any_error_feedback serial(int8);
    std::vector<std::byte> encoded(int8.encoded_bytes(size));
    std::vector<float> sum(size, 0.0f);
    for (int round = 0; round < 3; ++round) {
      const std::vector<float> delta = values_of(source, round, size);
      serial.visit([&](auto& f) { f.encode(std::span<const float>(delta), std::span<std::byte>(encoded)); });
      int8.decode_add(encoded, sum);
    }
    for (std::size_t k = 0; k < size; ++k) expect_close("int8 accumulates", value[k], sum[k], 0.0);
  });
  win.free();
}

// The one-sided gossip over a model of every size: rank 0 steps twice as
// often; after quiesce() the weights sum to n and the p-weighted mean is
// the starting mean; finish() brings every rank to it.
struct gossip_totals {
  double weights = 0;
  std::vector<double> weighted;
};
void gossip(communicator& comm, gossip_totals& totals, const std::vector<double>& mean) {
  std::vector<std::vector<float>> tensors;
  for (std::size_t t = 0; t < sizes.size(); ++t)
    tensors.push_back(values_of(comm.rank(), static_cast<int>(t), sizes[t]));
  std::vector<std::span<float>> spans(tensors.begin(), tensors.end());
  const auto flat = [&] {
    std::vector<float> all;
    for (const auto& tensor : tensors) all.insert(all.end(), tensor.begin(), tensor.end());
    return all;
  };
  chorus::averaging::one_sided_gossip scheme(comm, chorus::averaging::parameters(spans));
  const int steps = comm.rank() == 0 ? 40 : 20;
  for (int step = 0; step < steps; ++step) {
    scheme.step([] {}, [] {});
    if (step == 0) comm.barrier();
  }
  scheme.quiesce();
  totals.weights += scheme.weight();
  const std::vector<float> x = flat();
  totals.weighted.resize(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) totals.weighted[k] += scheme.weight() * x[k];
  comm.barrier();
  scheme.finish();
  const std::vector<float> finished = flat();
  for (std::size_t k = 0; k < finished.size(); ++k) expect_close("one-sided gossip finish", finished[k], mean[k]);
  wrong["one-sided gossip pushed"] += scheme.stats().exchanges > 0 ? 0 : 1;
}

// Downpour fetching by window get (parameter_server.hpp), a shard on every
// rank or one dedicated server: worker w's gradient is 1 on its own block
// of 5 elements, so with rate W / 8 over W workers (a push moves the block
// by rate / W = 1/8, exactly) every element is 1 - k / 8 for a whole k, the
// pushes a fetch holds. Each fetch holds
// a published state (a whole k), no worker's count ever goes back, and
// after finish() every push is in. Workers take 12 + 3w steps, then step
// on, 1 ms of simulated time apart, until a fetch holds one of their own
// pushes.
constexpr std::size_t block = 5;
constexpr double push_moves = 0.125;
std::size_t pushes_held(const std::vector<float>& x, int worker) {
  const float moved = 1.0f - x[static_cast<std::size_t>(worker) * block];
  return static_cast<std::size_t>(std::lround(moved / push_moves));
}
void downpour_by_get(communicator& comm, int servers, std::vector<int>& steps_taken) {
  namespace avg = chorus::averaging;
  const std::string what = std::string("downpour by get, ") + std::to_string(servers) + " dedicated servers";
  const int workers = comm.size() - servers, worker = comm.rank() - servers;
  std::vector<float> x(static_cast<std::size_t>(workers) * block + 2, 1.0f), g(x.size(), 0.0f);
  if (worker >= 0)
    for (std::size_t k = 0; k < block; ++k) g[static_cast<std::size_t>(worker) * block + k] = 1.0f;
  avg::parameters params{std::span<float>(x)}, grads{std::span<float>(g)};
  avg::parameter_server ps(comm, params, grads,
                           {.mode = avg::consistency::downpour,
                            .dedicated_servers = servers,
                            .optimiser = {.learning_rate = push_moves * workers},
                            .fetch_by_get = true});
  std::vector<std::size_t> last(static_cast<std::size_t>(workers), 0);
  int step = 0;
  for (bool own_seen = false; ps.is_worker() && (step < 12 + 3 * worker || !own_seen);) {
    if (++step > 12 + 3 * worker) simgrid::s4u::this_actor::sleep_for(1e-3);
    if (step > 20000) {
      ++wrong[what + ": a fetch held one of its own pushes"];
      break;
    }
    ps.step([] {}, [] {});
    for (std::size_t k = 0; k < x.size(); ++k) {
      const double held = (1.0 - static_cast<double>(x[k])) / push_moves;
      const bool untouched = k >= static_cast<std::size_t>(workers) * block;
      wrong[what + ": every fetch a published state"] +=
          held != std::round(held) || held < 0 || (untouched && held != 0) ? 1 : 0;
    }
    for (int v = 0; v < workers; ++v) {
      const std::size_t held = pushes_held(x, v);
      wrong[what + ": no count goes back"] += held < last[static_cast<std::size_t>(v)] ? 1 : 0;
      last[static_cast<std::size_t>(v)] = held;
    }
    own_seen = pushes_held(x, worker) > 0;
  }
  if (ps.is_worker()) steps_taken[static_cast<std::size_t>(worker)] = step;
  ps.finish();
  for (int v = 0; v < workers; ++v)
    wrong[what + ": every push in at the end"] +=
        pushes_held(x, v) != static_cast<std::size_t>(steps_taken[static_cast<std::size_t>(v)]) ? 1 : 0;
  if (ps.is_worker())
    wrong[what + ": a fetch every step, none waited"] +=
        ps.worker_stats().fetches_applied != static_cast<std::uint64_t>(step) || ps.worker_stats().waited_seconds != 0.0
            ? 1
            : 0;
}

std::vector<double> starting_mean(int n) {
  std::vector<double> mean;
  for (int r = 0; r < n; ++r) {
    std::size_t at = 0;
    for (std::size_t t = 0; t < sizes.size(); ++t)
      for (float v : values_of(r, static_cast<int>(t), sizes[t])) {
        if (mean.size() <= at) mean.push_back(0.0);
        mean[at++] += static_cast<double>(v) / n;
      }
  }
  return mean;
}

}  // namespace

int main(int argc, char** argv) {
  chorus::sim::engine engine(argc, argv);
  chorus::sim::platform_model model;
  model.nic = {125e6, 50e-6};  // 1 Gbit/s
  const auto hosts = chorus::sim::star(5, 1, model);
  const auto on = [&](std::initializer_list<std::pair<int, int>> layout) {  // (host, ranks on it)
    std::vector<simgrid::s4u::Host*> host_of;
    for (const auto& [host, ranks] : layout)
      for (int r = 0; r < ranks; ++r) host_of.push_back(hosts[static_cast<std::size_t>(host)]);
    return host_of;
  };
  const std::vector<std::pair<std::string, std::vector<simgrid::s4u::Host*>>> jobs{
      {"5 ranks on 5 hosts", on({{0, 1}, {1, 1}, {2, 1}, {3, 1}, {4, 1}})},
      {"6 ranks on hosts of 3, 2 and 1", on({{0, 3}, {1, 2}, {2, 1}})},
  };
  for (const auto& [name, host_of] : jobs) {
    const double started = simgrid::s4u::Engine::get_clock();
    const int n = static_cast<int>(host_of.size());
    const std::vector<double> mean = starting_mean(n);
    gossip_totals totals;
    std::vector<std::vector<int>> steps_taken(2, std::vector<int>(static_cast<std::size_t>(n)));
    chorus::sim::run(host_of, [&](communicator& comm) {
      for (std::size_t size : sizes) {
        put_then_update(comm, size);
        accumulates(comm, size);
        gets(comm, size);
        int8_accumulates(comm, size);
      }
      gossip(comm, totals, mean);
      for (int servers : {0, 1}) downpour_by_get(comm, servers, steps_taken[static_cast<std::size_t>(servers)]);
    });
    expect_close("one-sided gossip sum p = n", totals.weights, n, 1e-12);
    for (std::size_t k = 0; k < mean.size(); ++k)
      expect_close("one-sided gossip p-weighted mean", totals.weighted[k] / n, mean[k]);
    std::printf("sim_windows: %s: every case in %.3f ms of simulated time\n", name.c_str(),
                (simgrid::s4u::Engine::get_clock() - started) * 1e3);
  }
  std::size_t total = 0;
  for (const auto& [name, bad] : wrong) {
    std::printf("  %-36s %s\n", name.c_str(),
                bad == 0 ? "right" : (std::string("WRONG: ") + std::to_string(bad)).c_str());
    total += bad;
  }
  std::printf("sim_windows: %s\n", total == 0 ? "all right" : "FAILED");
  return total == 0 ? 0 : 1;
}
