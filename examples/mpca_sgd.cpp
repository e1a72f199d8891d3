// A scheme from the literature written from chorus's public blocks:
// MPCA-SGD (Langer et al., "MPCA SGD: a method for distributed training of
// deep learning models on Spark", 2018), as we read it. Workers take local
// SGD steps; every tau steps they average their models over a binomial tree
// (allreduce with algorithm::tree: reduce to rank 0, broadcast back),
// extrapolate the consensus from its last value, and each worker is pulled
// toward it by a penalty:
//   m = mean_i x_i;   c <- m + gamma (m - c);   x_i <- x_i - rho (x_i - c)
// finish() makes c the model to keep. Cost per exchange: 2 ceil(log2 n)
// (alpha + S beta), every tau steps.
//
// Run: mpca_sgd (5 ranks as threads; each minimises (x - i)^2 / 2 for its
// rank i). Exit code 0 when every rank matches a serial replay of the same
// recurrences and the consensus reaches the minimiser of the sum, 2.
#include <chorus/chorus.hpp>

#include <cmath>
#include <cstdio>
#include <mutex>
#include <string_view>
#include <vector>

namespace avg = chorus::averaging;

struct mpca_options {
  std::uint64_t tau = 2;  // local steps between exchanges
  double rho = 0.5;       // penalty: how far a worker moves toward the consensus
  double gamma = 0.3;     // extrapolation of the consensus
};

template <class Communicator>
class mpca_sgd : public avg::scheme_base<mpca_sgd<Communicator>> {
 public:
  mpca_sgd(Communicator& comm, avg::parameters model, mpca_options options)
      : comm_(comm), model_(std::move(model)), options_(options), consensus_(model_.snapshot()) {}

  void end_step() {
    this->count_step();
    if (this->stats_.steps % options_.tau == 0) exchange();
  }

  void finish() {
    exchange();
    model_.copy_from(consensus_);
  }

 private:
  void exchange() {
    std::vector<float> mean = model_.snapshot();
    this->metered(comm_, "mpca_sgd exchange", [&] {
      chorus::allreduce(comm_, std::span<float>(mean), chorus::op::avg{}, chorus::algorithm::tree);
    });
    const auto gamma = static_cast<float>(options_.gamma), rho = static_cast<float>(options_.rho);
    for (std::size_t k = 0; k < mean.size(); ++k) consensus_[k] = mean[k] + gamma * (mean[k] - consensus_[k]);
    model_.for_each_part(std::span<const float>(consensus_), [&](std::span<float> x, std::span<const float> c) {
      for (std::size_t k = 0; k < x.size(); ++k) x[k] -= rho * (x[k] - c[k]);
    });
    ++this->stats_.exchanges;
  }

  Communicator& comm_;
  avg::parameters model_;
  mpca_options options_;
  std::vector<float> consensus_;
};

constexpr int rank_count = 5, step_count = 120;
constexpr float step_size = 0.1f;
constexpr mpca_options chosen{};

// The same recurrences on one thread, in double; returns the kept consensus.
double serial_replay() {
  std::vector<double> x(rank_count, 0.0);
  double consensus = 0.0;
  const auto exchange = [&] {
    double mean = 0;
    for (double value : x) mean += value / rank_count;
    consensus = mean + chosen.gamma * (mean - consensus);
    for (double& value : x) value -= chosen.rho * (value - consensus);
  };
  for (int step = 1; step <= step_count; ++step) {
    for (int i = 0; i < rank_count; ++i)
      x[static_cast<std::size_t>(i)] -= step_size * (x[static_cast<std::size_t>(i)] - i);
    if (step % static_cast<int>(chosen.tau) == 0) exchange();
  }
  exchange();
  return consensus;
}

int main(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h";
    std::printf(
        "usage: mpca_sgd   (no arguments)\n"
        "MPCA-SGD on 5 ranks as threads, checked against a serial replay of its recurrences.\n");
    return help ? 0 : 2;
  }
  const double expected = serial_replay();
  int wrong = std::fabs(expected - 2.0) < 1e-3 ? 0 : 1;  // the consensus reaches the minimiser of the sum
  std::mutex lock;
  chorus::run_threads(rank_count, [&](chorus::communicator& comm) {
    std::vector<float> x(1001, 0.0f);  // everyone starts at 0; rank i's minimiser is i
    mpca_sgd scheme(comm, avg::parameters(std::span<float>(x)), chosen);
    const auto target = static_cast<float>(comm.rank());
    for (int step = 0; step < step_count; ++step)
      scheme.step([] {},
                  [&] {
                    for (float& value : x) value -= step_size * (value - target);
                  });
    scheme.finish();
    std::lock_guard guard(lock);
    for (float value : x) wrong += std::fabs(value - expected) > 1e-4;
    std::printf("rank %d: consensus %.6f (serial replay %.6f), %llu exchanges\n", comm.rank(), x[0], expected,
                static_cast<unsigned long long>(scheme.stats().exchanges));
  });
  std::printf("%s\n", wrong == 0 ? "MPCA-SGD matched its serial replay on every rank" : "WRONG");
  return wrong == 0 ? 0 : 1;
}
