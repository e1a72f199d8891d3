// Workers that leave on purpose (scheme.leave()), checked against closed
// forms: with zero gradients nothing but the averaging moves the models, so
// when nothing is lost the ranks that stay end (finish()) on the mean of
// every rank's initial model, the leavers' included; GoSGD's weights over
// the ranks that stay sum to 1 within 1e-12 at quiesce(). A parameter
// server (rank 0 serves; SSP or Downpour pushing every 3 steps) whose
// workers push constant gradients must end, bit for bit, on the start
// minus rate / W times every gradient every worker computed (each push,
// and a leaver's unpushed sum, applied once). Asynchronous EASGD's pulls
// conserve sum_i x_i + c, so with each rank adding a fixed step of its own
// to its model the centre after finish(), the stayers' models before it
// and the leavers' last ones must sum to the start ((n + 1) times the
// server's model) plus every step every rank took.
//
//   scheme_leave gosgd|ps-ssp|ps-downpour|easgd LEAVERS [ELEMENTS=4099]   (under a launcher)
//
// LEAVERS: comma-separated ranks; each leaves at a step of its own (rank r
// at step 3 + r), the others train 16 steps, some after the leavers left.
#include <chorus/chorus.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace avg = chorus::averaging;

namespace {

float initial(int rank, std::size_t index) { return static_cast<float>(rank * 7 + static_cast<int>(index % 13)); }

std::vector<int> ranks_in(const std::string& list) {
  std::vector<int> ranks;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) ranks.push_back(std::stoi(item));
  return ranks;
}

bool leaves(const std::vector<int>& leavers, int rank) {
  for (int r : leavers)
    if (r == rank) return true;
  return false;
}

// Off the mean of every rank's initial model (leavers included).
std::size_t off_the_mean(const std::vector<float>& model, int ranks) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < model.size(); ++i) {
    double mean = 0;
    for (int r = 0; r < ranks; ++r) mean += initial(r, i);
    mean /= ranks;
    wrong += std::abs(model[i] - mean) > 1e-4 * (1 + std::abs(mean));
  }
  return wrong;
}

int gossip(chorus::communicator& comm, const std::vector<int>& leavers, std::size_t count) {
  std::vector<float> model(count);
  for (std::size_t i = 0; i < count; ++i) model[i] = initial(comm.rank(), i);
  avg::gosgd scheme(comm, avg::parameters{std::span<float>(model)}, {.push_probability = 0.8, .seed = 5});
  const bool leaver = leaves(leavers, comm.rank());
  for (int step = 0; step < 16; ++step) {
    if (leaver && step == 3 + comm.rank()) {
      scheme.leave();
      std::printf("rank %d: left at step %d with weight %.3g: ok\n", comm.rank(), step, scheme.weight());
      return scheme.weight() == 0.0 ? 0 : 1;
    }
    scheme.step([] {}, [] {});
  }
  scheme.quiesce();
  std::vector<int> gone;
  for (int r : leavers) gone.push_back(comm.world_rank(r));
  chorus::communicator stayers = comm.without(gone);
  double total = scheme.weight();
  chorus::allreduce(stayers, std::span<double>(&total, 1), chorus::op::sum{});
  std::vector<int> seen = scheme.departed();
  scheme.finish();
  const std::size_t wrong = off_the_mean(model, comm.size());
  const bool ok = std::abs(total - 1.0) <= 1e-12 && wrong == 0 && seen.size() == leavers.size();
  std::printf("rank %d: gosgd, %zu of %d ranks left: weights sum to 1 %+.3g, %zu of %zu elements off the mean: %s\n",
              comm.rank(), seen.size(), comm.size(), total - 1.0, wrong, model.size(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

// Worker w's gradient: w in every element (dyadic: the sums are exact).
int parameter_server(chorus::communicator& comm, avg::consistency mode, const std::vector<int>& leavers,
                     std::size_t count) {
  std::vector<float> model(count, 0.0f), gradient(count, static_cast<float>(comm.rank()));
  const int workers = comm.size() - 1;
  avg::parameter_server scheme(comm, avg::parameters{std::span<float>(model)},
                               avg::parameters{std::span<float>(gradient)},
                               {.mode = mode,
                                .staleness = 2,
                                .push_every = mode == avg::consistency::downpour ? 3u : 1u,
                                .dedicated_servers = 1,
                                .optimiser = {.learning_rate = 0.25, .momentum = 0.0}});
  const auto steps_of = [&](int rank) { return leaves(leavers, rank) ? 2 + rank : 12; };
  if (scheme.is_worker()) {
    for (int step = 0; step < steps_of(comm.rank()); ++step) scheme.step([] {}, [] {});
    if (leaves(leavers, comm.rank())) {
      scheme.leave();
      std::printf("rank %d: left the parameter server after %d steps: ok\n", comm.rank(), steps_of(comm.rank()));
      return 0;
    }
  }
  scheme.finish();
  double expected = 0.0;  // every gradient of every worker, applied once at rate / W
  for (int w = 1; w < comm.size(); ++w) expected -= 0.25 / workers * steps_of(w) * w;
  std::size_t wrong = 0;
  for (float value : model) wrong += value != static_cast<float>(expected);
  std::printf("rank %d: parameter server (%s), %zu of %d workers left: %zu of %zu elements off %g: %s\n", comm.rank(),
              std::string(avg::to_string(mode)).c_str(), leavers.size(), workers, wrong, model.size(), expected,
              wrong == 0 ? "ok" : "WRONG");
  return wrong == 0 ? 0 : 1;
}

float step_of(int rank, std::size_t index) { return 0.125f * static_cast<float>((rank + 1) * (1 + index % 3)); }

int elastic(chorus::communicator& comm, const std::vector<int>& leavers, std::size_t count) {
  std::vector<float> model(count);
  for (std::size_t i = 0; i < count; ++i) model[i] = initial(comm.rank(), i);
  avg::easgd_async scheme(comm, avg::parameters{std::span<float>(model)}, {.alpha = 0.3, .tau = 2, .server = 0});
  const auto step = [&] {
    for (std::size_t i = 0; i < count; ++i) model[i] += step_of(comm.rank(), i);
  };
  const auto steps_of = [&](int rank) { return leaves(leavers, rank) ? 3 + rank : 12; };
  constexpr int last_models = 77;  // the leavers' last models, to the server (a tag of the job's communicator)
  if (leaves(leavers, comm.rank())) {
    for (int s = 0; s < steps_of(comm.rank()); ++s) scheme.step([] {}, step);
    scheme.leave();
    comm.send(std::span<const float>(model), 0, last_models);
    std::printf("rank %d: left the elastic averaging: ok\n", comm.rank());
    return 0;
  }
  for (int s = 0; s < steps_of(comm.rank()); ++s) scheme.step([] {}, step);
  std::vector<double> held(model.begin(), model.end());  // x_i before finish() replaces it by the centre
  scheme.finish();
  std::vector<int> gone;
  for (int r : leavers) gone.push_back(comm.world_rank(r));
  chorus::communicator stayers = comm.without(gone);
  chorus::reduce(stayers, std::span<double>(held), 0, chorus::op::sum{});
  if (comm.rank() != 0) return 0;
  std::vector<float> last(count);
  for (int r : leavers) {
    comm.recv(std::span<float>(last), r, last_models);
    for (std::size_t i = 0; i < count; ++i) held[i] += last[i];
  }
  std::size_t wrong = 0;  // sum x_i + c: every x_i(0) = c(0) = the server's, plus every rank's steps
  for (std::size_t i = 0; i < count; ++i) {
    double expected = (comm.size() + 1) * static_cast<double>(initial(0, i));
    for (int r = 0; r < comm.size(); ++r) expected += steps_of(r) * static_cast<double>(step_of(r, i));
    wrong += std::abs(held[i] + model[i] - expected) > 1e-4 * (1 + std::abs(expected));
  }
  std::printf("rank 0: easgd_async, %zu of %d ranks left: sum x + c conserved, %zu of %zu elements off: %s\n",
              leavers.size(), comm.size(), wrong, count, wrong == 0 ? "ok" : "WRONG");
  return wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h") {
    std::printf(
        "usage: scheme_leave gosgd|ps-ssp|ps-downpour|easgd LEAVERS [ELEMENTS]   (under a launcher)\n"
        "LEAVERS (comma-separated ranks) leave on purpose; the others must end on the mean of every initial model.\n");
    return argc < 3 && !(argc > 1 && std::string_view(argv[1]) == "--help") ? 2 : 0;
  }
  try {
    const std::string scheme = argv[1];
    const std::vector<int> leavers = ranks_in(argv[2]);
    const std::size_t count = argc > 3 ? std::stoul(argv[3]) : 4099;
    chorus::communicator comm = chorus::init();
    if (scheme == "gosgd") return gossip(comm, leavers, count);
    if (scheme == "ps-ssp") return parameter_server(comm, avg::consistency::ssp, leavers, count);
    if (scheme == "ps-downpour") return parameter_server(comm, avg::consistency::downpour, leavers, count);
    if (scheme == "easgd") return elastic(comm, leavers, count);
    std::fprintf(stderr, "scheme_leave: unknown scheme %s\n", scheme.c_str());
    return 2;
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "scheme_leave: %s\n", failure.what());
    return 1;
  }
}
