// Runs averaging schemes with zero gradients and checks the model each
// ends with against a closed form: D-PSGD (W doubly stochastic), GoSGD
// (sum a x is invariant) and local SGD (plain averaging) all preserve the
// mean, so after finish() every rank must hold the mean of the initial
// models, element for element. Used across simulated hosts by
// tests/cross_host; any launcher works.
//
//   scheme_consensus [ELEMENTS=10007]
#include <chorus/chorus.hpp>

#include <cmath>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace avg = chorus::averaging;

namespace {

float initial(int rank, std::size_t index) { return static_cast<float>(rank * 3 + static_cast<int>(index % 11)); }

template <class Scheme>
int check(chorus::communicator& comm, const char* name, std::vector<float>& model, Scheme&& scheme) {
  for (int step = 0; step < 12; ++step) scheme.step([] {}, [] {});
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

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h")) {
    std::printf(
        "usage: scheme_consensus [ELEMENTS]   (under a launcher)\n"
        "D-PSGD, GoSGD and local SGD with zero gradients must end on the mean of the initial models.\n");
    return 0;
  }
  const std::size_t count = argc > 1 ? std::stoul(argv[1]) : 10007;
  chorus::communicator comm = chorus::init();
  int failures = 0;
  std::vector<float> a = fresh(comm.rank(), count);
  failures += check(comm, "dpsgd", a, avg::dpsgd(comm, avg::parameters{std::span<float>(a)}));
  std::vector<float> b = fresh(comm.rank(), count);
  failures +=
      check(comm, "gosgd", b, avg::gosgd(comm, avg::parameters{std::span<float>(b)}, {.push_probability = 0.7}));
  std::vector<float> c = fresh(comm.rank(), count);
  failures += check(comm, "local_sgd", c, avg::local_sgd(comm, avg::parameters{std::span<float>(c)}, {.period = 3}));
  return failures == 0 ? 0 : 1;
}
