// Runs averaging schemes with zero gradients and checks the model each
// ends with against a closed form: D-PSGD (W doubly stochastic), GoSGD
// (sum a x is invariant) and local SGD (plain averaging) all preserve the
// mean, so after finish() every rank must hold the mean of the initial
// models, element for element. Used across simulated hosts by
// tests/cross_host; any launcher works. With --slow or --jitter each step
// stands in a compute of --step-ms (2) and the ranks differ
// (averaging/heterogeneity.hpp): the closed form must hold all the same.
//
//   scheme_consensus [ELEMENTS=10007] [--slow RANK:FACTOR]... [--jitter DIST] [--seed S] [--step-ms MS]
#include <chorus/chorus.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace avg = chorus::averaging;

namespace {

float initial(int rank, std::size_t index) { return static_cast<float>(rank * 3 + static_cast<int>(index % 11)); }

struct dials {
  std::size_t count = 10007;
  avg::heterogeneity_options heterogeneity{};
  double step_ms = 2.0;
};

template <class Scheme>
int check(chorus::communicator& comm, const dials& given, const char* name, std::vector<float>& model,
          Scheme&& scheme) {
  avg::step_delays delays(comm.rank(), comm.size(), given.heterogeneity);
  const auto compute = [&] {
    if (delays.delays())
      delays.around([&] { std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(given.step_ms)); });
  };
  for (int step = 0; step < 12; ++step) scheme.step(compute, [] {});
  scheme.finish();
  const int n = comm.size();
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < model.size(); ++i) {
    double mean = 0;
    for (int r = 0; r < n; ++r) mean += initial(r, i);
    mean /= n;
    wrong += std::abs(model[i] - mean) > 1e-4 * (1 + std::abs(mean));
  }
  std::printf("rank %d: %s on %d ranks: %s (%zu of %zu elements off the mean)\n", comm.rank(), name, n,
              wrong ? "WRONG" : "ok", wrong, model.size());
  return wrong ? 1 : 0;
}

std::vector<float> fresh(int rank, std::size_t count) {
  std::vector<float> model(count);
  for (std::size_t i = 0; i < count; ++i) model[i] = initial(rank, i);
  return model;
}

[[noreturn]] void usage(int status) {
  std::printf(
      "usage: scheme_consensus [ELEMENTS] [--slow RANK:FACTOR]... [--jitter DIST] [--seed S] [--step-ms MS]"
      "   (under a launcher)\n"
      "D-PSGD, GoSGD and local SGD with zero gradients must end on the mean of the initial models.\n");
  std::exit(status);
}

dials parse(int argc, char** argv) {
  dials given;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") usage(0);
    try {
      if (flag.substr(0, 2) != "--") {
        given.count = std::stoul(argv[i]);
        continue;
      }
      if (i + 1 >= argc) usage(2);
      const std::string value = argv[++i];
      if (flag == "--slow")
        given.heterogeneity.slow.push_back(avg::slow_rank_from(value));
      else if (flag == "--jitter")
        given.heterogeneity.jitter = avg::jitter_from(value);
      else if (flag == "--seed")
        given.heterogeneity.seed = std::stoull(value);
      else if (flag == "--step-ms")
        given.step_ms = std::stod(value);
      else
        usage(2);
    } catch (const std::exception& problem) {
      std::fprintf(stderr, "scheme_consensus: %s: %s\n", argv[i], problem.what());
      std::exit(2);
    }
  }
  return given;
}

}  // namespace

int main(int argc, char** argv) {
  const dials given = parse(argc, argv);
  const std::size_t count = given.count;
  chorus::communicator comm = chorus::init();
  int failures = 0;
  std::vector<float> a = fresh(comm.rank(), count);
  failures += check(comm, given, "dpsgd", a, avg::dpsgd(comm, avg::parameters{std::span<float>(a)}));
  std::vector<float> b = fresh(comm.rank(), count);
  failures +=
      check(comm, given, "gosgd", b, avg::gosgd(comm, avg::parameters{std::span<float>(b)}, {.push_probability = 0.7}));
  std::vector<float> c = fresh(comm.rank(), count);
  failures +=
      check(comm, given, "local_sgd", c, avg::local_sgd(comm, avg::parameters{std::span<float>(c)}, {.period = 3}));
  return failures == 0 ? 0 : 1;
}
