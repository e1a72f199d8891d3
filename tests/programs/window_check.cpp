// Tensor windows between processes (any launcher; tests/cross_host runs it
// across simulated hosts over TCP): every operation against a serial
// reference, a torn-read stress, the one-sided gossip's invariants and
// D-PSGD on a window against two-sided D-PSGD, bit for bit. Exit 0 when
// every check holds.
//
//   chorus-run -n 5 window_check
#include <chorus/chorus.hpp>

#include "../window_values.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace avg = chorus::averaging;

namespace {

using chorus_test::value_of;
using chorus_test::values_of;

bool close(float got, double expected) {
  return std::fabs(static_cast<double>(got) - expected) <= 1e-5 * (1.0 + std::fabs(expected));
}

struct checks {
  chorus::communicator& comm;
  int failed = 0;
  void expect(bool holds, const std::string& what) {
    if (holds) return;
    ++failed;
    std::printf("rank %d: WRONG: %s\n", comm.rank(), what.c_str());
  }
};

void put_and_update(checks& check, std::size_t size) {
  chorus::communicator& comm = check.comm;
  const int me = comm.rank();
  const std::vector<int> sources = chorus_test::ring_sources(me, comm.size());
  std::vector<float> x = values_of(me, 0, size);
  chorus::window win(comm, x, {.sources = sources});
  std::vector<chorus::neighbour_weight> to;
  for (int target : win.targets()) to.push_back({target, 0.5});
  win.put(x, to);
  win.wait_versions(1);
  std::vector<float> out = x;
  std::vector<chorus::neighbour_weight> from;
  for (int source : sources) from.push_back({source, 0.25});
  win.update(out, 0.5, from);
  std::size_t wrong = 0;
  for (std::size_t k = 0; k < size; ++k) {
    double expected = 0.5 * x[k];
    for (int source : sources) expected += 0.25 * static_cast<double>(0.5f * value_of(source, 0, k));
    wrong += !close(out[k], expected);
  }
  check.expect(wrong == 0, "put/update of " + std::to_string(size) + " elements: " + std::to_string(wrong) + " off");
  win.free();
}

void accumulate_and_get(checks& check, std::size_t size) {
  chorus::communicator& comm = check.comm;
  const int me = comm.rank();
  chorus::window win(comm, values_of(me, 9, size));
  for (int round = 0; round < 4; ++round) win.accumulate(values_of(me, round, size));
  win.quiesce();
  std::size_t wrong = 0;
  win.collect(
      [&](int source, std::span<const float> value, double p) {
        wrong += p != 4.0;
        for (std::size_t k = 0; k < size; ++k) {
          double expected = 0;
          for (int round = 0; round < 4; ++round) expected += value_of(source, round, k);
          wrong += !close(value[k], expected);
        }
      },
      true);
  win.get();
  win.collect([&](int source, std::span<const float> value, double p) {
    wrong += p != 1.0;
    for (std::size_t k = 0; k < size; ++k) wrong += value[k] != value_of(source, 9, k);
  });
  check.expect(wrong == 0,
               "accumulate/get of " + std::to_string(size) + " elements: " + std::to_string(wrong) + " off");
  comm.barrier();
  win.free();
}

void torn_reads(checks& check) {
  chorus::communicator& comm = check.comm;
  const std::size_t size = 100000;
  std::vector<float> x(size, 1.0f);
  chorus::window win(comm, x);
  std::size_t wrong = 0, reads = 0;
  if (comm.rank() != 0) {
    for (int round = 1; round <= 200; ++round) {
      std::fill(x.begin(), x.end(), static_cast<float>(round));
      win.set_p(round);
      win.put(x);
      win.publish(x);
    }
    win.flush();
  } else {
    for (int sweep = 0; sweep < 200; ++sweep) {
      if (sweep % 4 == 0) win.get();
      win.collect([&](int, std::span<const float> value, double p) {
        ++reads;
        for (float v : value) wrong += v != static_cast<float>(p);
      });
    }
  }
  check.expect(wrong == 0, "torn reads: " + std::to_string(wrong) + " elements of " + std::to_string(reads) +
                               " reads mixed two entries");
  comm.barrier();
  win.free();
}

void gossip(checks& check) {
  chorus::communicator& comm = check.comm;
  const std::size_t size = 10007;
  std::vector<float> x = values_of(comm.rank(), 0, size);
  avg::one_sided_gossip scheme(comm, avg::parameters{std::span<float>(x)});
  for (int step = 0; step < 10 + 5 * comm.rank(); ++step) scheme.step([] {}, [] {});
  scheme.quiesce();
  double weight = scheme.weight();
  chorus::allreduce(comm, std::span<double>(&weight, 1), chorus::op::sum{});
  check.expect(std::fabs(weight - comm.size()) < 1e-9, "gossip: the weights sum to " + std::to_string(weight));
  scheme.finish();
  std::size_t wrong = 0;
  for (std::size_t k = 0; k < size; ++k) {
    double mean = 0;
    for (int r = 0; r < comm.size(); ++r) mean += static_cast<double>(value_of(r, 0, k)) / comm.size();
    wrong += !close(x[k], mean);
  }
  check.expect(wrong == 0, "gossip: " + std::to_string(wrong) + " elements off the mean after finish()");
}

void dpsgd_bits(checks& check) {
  chorus::communicator& comm = check.comm;
  std::vector<float> results[2];
  for (const bool one_sided : {false, true}) {
    std::vector<float> x = values_of(comm.rank(), 0, 4099);
    avg::dpsgd scheme(comm, avg::parameters{std::span<float>(x)},
                      {.codec = chorus::codec::by_name("fp16"), .one_sided = one_sided});
    for (int step = 0; step < 8; ++step)
      scheme.step([] {},
                  [&] {
                    for (float& value : x) value -= 0.05f * (value - static_cast<float>(comm.rank()));
                  });
    results[one_sided] = x;
  }
  check.expect(results[0] == results[1], "D-PSGD on a window differs from two-sided D-PSGD");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
    std::printf("usage: window_check   (under a launcher)\nTensor windows between processes, checked.\n");
    return 0;
  }
  chorus::communicator comm = chorus::init();
  checks check{comm};
  for (std::size_t size :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4099}, (std::size_t{1} << 18) + 3})
    put_and_update(check, size);
  for (std::size_t size : {std::size_t{0}, std::size_t{1}, std::size_t{4099}}) accumulate_and_get(check, size);
  torn_reads(check);
  gossip(check);
  dpsgd_bits(check);
  std::printf("rank %d of %d: window_check %s\n", comm.rank(), comm.size(), check.failed ? "FAILED" : "ok");
  return check.failed ? 1 : 0;
}
