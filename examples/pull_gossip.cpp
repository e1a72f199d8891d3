// A one-sided scheme written by a user, in one short file: pull gossip.
// After each local step a rank publishes its model in a tensor window and
// averages it with the model one random in-neighbour last published, read
// with get(): the neighbour is never asked and never waits (compare
// custom_scheme.cpp, whose rounds wait for messages). Run: pull_gossip (5
// ranks as threads at different speeds, their steps aligned by a barrier so
// that the outcome is sure; exit code 0 when their models agree to 1e-3
// after 60 steps, from a spread of 4).
#include <chorus/chorus.hpp>
#include <chorus/window.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string_view>
#include <thread>
#include <vector>

namespace avg = chorus::averaging;

template <class Communicator>
class pull_gossip : public avg::scheme_base<pull_gossip<Communicator>> {
 public:
  pull_gossip(Communicator& comm, std::span<float> model)
      : model_(model), window_(comm, model), random_(static_cast<unsigned>(comm.rank())) {}

  void end_step() {
    window_.publish(model_);  // what the others read from now on
    const std::vector<int> sources = window_.sources();
    if (sources.empty()) return;
    const int from = sources[std::uniform_int_distribution<std::size_t>(0, sources.size() - 1)(random_)];
    this->metered(window_.communicator(), "pull_gossip get", [&] { window_.get({{from, 1.0}}); });
    window_.update(model_, 0.5, {{from, 0.5}});  // x = (x + x_from) / 2
    this->count_step();
  }

  void finish() { window_.free(); }  // collective

 private:
  std::span<float> model_;
  chorus::window<Communicator> window_;
  std::mt19937 random_;
};

int main(int argc, char** argv) {
  if (argc > 1) {
    std::printf("usage: pull_gossip   (no arguments)\nPull gossip over a tensor window, 5 ranks as threads.\n");
    return std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h" ? 0 : 2;
  }
  constexpr int ranks = 5, steps = 60;
  std::vector<std::vector<float>> models(ranks);
  chorus::run_threads(ranks, [&](chorus::communicator& comm) {
    std::vector<float>& model = models[static_cast<std::size_t>(comm.rank())];
    model.assign(1000, static_cast<float>(comm.rank()));  // ranks hold 0, 1, 2, 3, 4
    pull_gossip scheme(comm, std::span<float>(model));
    for (int step = 0; step < steps; ++step) {
      scheme.step([] {}, [] {});
      std::this_thread::sleep_for(std::chrono::microseconds(200 * (comm.rank() + 1)));  // unequal speeds
      comm.barrier();  // keeps this demo's steps overlapping, so its check is sure; the scheme never waits
    }
    comm.barrier();
    scheme.finish();
  });
  float lowest = models[0][0], highest = models[0][0];
  for (const auto& model : models)
    for (float value : model) {
      lowest = std::min(lowest, value);
      highest = std::max(highest, value);
    }
  std::printf("after %d steps every model lies in [%.5f, %.5f] (they started in [0, 4])\n", steps, lowest, highest);
  return highest - lowest < 1e-3f ? 0 : 1;
}
