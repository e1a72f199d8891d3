// A new averaging scheme from chorus's public building blocks: push-sum
// (the gossip under Stochastic Gradient Push, Assran et al. 2019). Each rank
// keeps a weight w besides its model z; it sends (w z, w) along a
// column-stochastic topology and divides what it gets back: z = sum / weight.
// Unlike plain mixing, this reaches the exact mean on directed graphs whose
// rows do not sum to 1. Run: custom_scheme (5 ranks as threads; exit code 0
// when every rank reaches the mean that plain mixing misses).
#include <chorus/chorus.hpp>

#include <cmath>
#include <cstdio>
#include <string_view>
#include <vector>

namespace avg = chorus::averaging;

template <class Communicator>
class push_sum : public avg::scheme_base<push_sum<Communicator>> {
 public:
  push_sum(Communicator& comm, avg::parameters model, avg::topology graph)
      : model_(std::move(model)), graph_(std::move(graph)), exchange_(comm, model_.size() + 1), me_(comm.rank()) {
    graph_.require(avg::stochastic::column);  // what push-sum needs, and all
  }

  void end_step() {
    std::vector<float> message(model_.size() + 1), sum(model_.size() + 1);
    model_.copy_to(std::span(message).first(model_.size()));
    for (float& value : message) value *= weight_;  // numerators w z ...
    message.back() = weight_;                       // ... and the weight
    const avg::mixing_matrix& w = graph_.at(round_++);
    this->metered([&] { exchange_.start(w, message); });
    for (std::size_t k = 0; k < sum.size(); ++k) sum[k] = static_cast<float>(w.weight(me_, me_)) * message[k];
    exchange_.finish([&](int, double share, std::span<const float> theirs) {
      for (std::size_t k = 0; k < sum.size(); ++k) sum[k] += static_cast<float>(share) * theirs[k];
    });
    weight_ = sum.back();
    for (float& value : sum) value /= weight_;
    model_.copy_from(std::span<const float>(sum).first(model_.size()));
    this->count_step();
  }

 private:
  avg::parameters model_;
  avg::topology graph_;
  avg::neighbour_exchange<Communicator> exchange_;
  int me_;
  float weight_ = 1.0f;
  std::size_t round_ = 0;
};

int main(int argc, char** argv) {
  if (argc > 1) {
    const bool help = std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h";
    std::printf(
        "usage: custom_scheme   (no arguments)\n"
        "Push-sum on a skewed graph, 5 ranks as threads: reaches the exact mean where plain mixing does not.\n");
    return help ? 0 : 2;
  }
  constexpr int ranks = 5, rounds = 80;
  // Column j: rank 0 keeps 1/3 and sends 1/3 to ranks 1 and 2; every other
  // rank keeps 1/2 and sends 1/2 to the next. Row 2 sums to 4/3.
  std::vector<std::vector<double>> w(ranks, std::vector<double>(ranks, 0.0));
  w[0][0] = w[1][0] = w[2][0] = 1.0 / 3;
  for (int j = 1; j < ranks; ++j) w[j][j] = w[(j + 1) % ranks][j] = 0.5;
  const avg::topology graph = avg::topology::from_weights(w, avg::stochastic::column, "skewed push");

  // What plain mixing x <- W x would reach instead of the mean 2.
  std::vector<double> plain{0, 1, 2, 3, 4};
  for (int round = 0; round < rounds; ++round) {
    std::vector<double> next(ranks, 0.0);
    for (int i = 0; i < ranks; ++i)
      for (int j = 0; j < ranks; ++j)
        next[static_cast<std::size_t>(i)] +=
            w[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] * plain[static_cast<std::size_t>(j)];
    plain = next;
  }
  std::printf("plain mixing ends at %.4f, the mean is 2\n", plain[0]);

  int wrong = std::fabs(plain[0] - 2.0) < 1e-2 ? 1 : 0;  // the example would prove nothing
  std::mutex lock;
  chorus::run_threads(ranks, [&](chorus::communicator& comm) {
    std::vector<float> model(1001, static_cast<float>(comm.rank()));  // ranks hold 0, 1, 2, 3, 4
    push_sum scheme(comm, avg::parameters(std::span<float>(model)), graph);
    for (int round = 0; round < rounds; ++round) scheme.step([] {}, [] {});
    std::lock_guard guard(lock);
    for (float value : model) wrong += std::fabs(value - 2.0f) > 1e-5f;
    std::printf("rank %d: %.6f after %d rounds, %.1f kB sent\n", comm.rank(), model[0], rounds,
                static_cast<double>(scheme.stats().bytes_sent) / 1e3);
  });
  std::printf("%s\n", wrong == 0 ? "push-sum reached the exact mean on every rank" : "WRONG");
  return wrong == 0 ? 0 : 1;
}
