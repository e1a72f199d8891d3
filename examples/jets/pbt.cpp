// Hyper-parameter search for the W-jet tagger in C++ (LibTorch), as
// examples/python/pbt_jet_tagger.py does it: the ranks split into members
// (communicator::split), each trains one tagger data-parallel over its ranks
// (allreduce-SGD on the model's tensors), and
//
//   --mode pbt     every --exploit-every epochs the members are ranked by
//                  held-out AUC; each one in the bottom quarter (at least
//                  one) copies the weights and SGD momentum of one in the top
//                  quarter (a send between the members' first ranks, then a
//                  broadcast inside the member) and perturbs the copied
//                  learning rate (x0.8 or x1.25) and momentum (+-0.05)
//   --mode random  a plain parallel random search from the same draws
//
//   chorus-run -n 8 build/examples/jet_pbt --data jets.npz --members 4 --csv pbt.csv
//
// Learning rates start log-uniform in [1e-3, 0.3], momenta uniform in
// [0.5, 0.99], drawn per member from --seed (C++'s generator: not the
// Python script's draws). Rank 0 prints each member's AUC and
// hyper-parameters every epoch and what was copied; --csv writes the Python
// script's columns (examples/python/jets_table.py plots them); --dump FILE
// writes every rank's member and state (weights, then momentum) as .npz.
#include <chorus/chorus.hpp>

#include "tagger.hpp"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>

namespace {

constexpr int exploit_tag = 7001;  // the world communicator's tag for the copies between members

struct settings {
  std::string data = "jets.npz", model = "cnn", mode = "pbt", csv, dump;
  int members = 4, epochs = 8, exploit_every = 2;
  std::int64_t batch = 128, seed = 0;
  double test_fraction = 0.2;
};

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << "usage: jet_pbt [--data FILE] [--model cnn|deepsets] [--members M] [--mode pbt|random] "
                   "[--epochs N] [--exploit-every K] [--batch B] [--seed S] [--test-fraction F] [--csv FILE] "
                   "[--dump FILE]\n";
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--data")
      s.data = value;
    else if (flag == "--model")
      s.model = value;
    else if (flag == "--mode")
      s.mode = value;
    else if (flag == "--csv")
      s.csv = value;
    else if (flag == "--dump")
      s.dump = value;
    else if (flag == "--members")
      s.members = std::stoi(value);
    else if (flag == "--epochs")
      s.epochs = std::stoi(value);
    else if (flag == "--exploit-every")
      s.exploit_every = std::stoi(value);
    else if (flag == "--batch")
      s.batch = std::stoll(value);
    else if (flag == "--seed")
      s.seed = std::stoll(value);
    else if (flag == "--test-fraction")
      s.test_fraction = std::stod(value);
    else
      throw std::invalid_argument("unknown flag " + flag + " (--help)");
  }
  if (s.mode != "pbt" && s.mode != "random") throw std::invalid_argument("--mode is pbt or random");
  return s;
}

struct hyper {
  double lr = 0, momentum = 0;
};

hyper draw(std::int64_t seed, int member) {
  std::seed_seq seeds{static_cast<std::uint64_t>(seed), static_cast<std::uint64_t>(member)};
  std::mt19937_64 random(seeds);
  const double lr = std::exp(std::uniform_real_distribution<double>(std::log(1e-3), std::log(0.3))(random));
  return {lr, std::uniform_real_distribution<double>(0.5, 0.99)(random)};
}

hyper perturbed(const hyper& h, std::int64_t seed, int epoch, int member) {
  std::seed_seq seeds{static_cast<std::uint64_t>(seed), static_cast<std::uint64_t>(epoch),
                      static_cast<std::uint64_t>(member), std::uint64_t{1}};
  std::mt19937_64 random(seeds);
  const double factor = random() % 2 == 0 ? 0.8 : 1.25;
  const double step = random() % 2 == 0 ? -0.05 : 0.05;
  return {h.lr * factor, std::clamp(h.momentum + step, 0.5, 0.99)};
}

// This rank's share of one member: its model, SGD and allreduce-SGD on the member's communicator.
struct member {
  int index;
  chorus::communicator& comm;
  const settings& config;
  hyper chosen;
  jets::network model;
  jets::tensors tensors;
  torch::optim::SGD sgd;
  chorus::averaging::allreduce_sgd<chorus::communicator> scheme;

  member(int i, chorus::communicator& c, const settings& s)
      : index(i),
        comm(c),
        config(s),
        chosen(draw(s.seed, i)),
        model(jets::model_named(s.model)),
        tensors(model),
        sgd(tensors.parameters, torch::optim::SGDOptions(chosen.lr).momentum(chosen.momentum)),
        scheme(c, tensors.values(), tensors.gradients()) {
    for (const torch::Tensor& p : tensors.parameters) {  // the buffers exist from the start: an exploit copies them
      auto state = std::make_unique<torch::optim::SGDParamState>();
      state->momentum_buffer(torch::zeros_like(p));
      sgd.state()[p.unsafeGetTensorImpl()] = std::move(state);
    }
  }

  void epoch(int number, const jets::sample& data) {
    jets::train_epoch(scheme, model, tensors, sgd, data, {comm.rank(), comm.size(), config.batch, config.seed}, number);
  }

  torch::Tensor& momentum_of(const torch::Tensor& p) {
    return static_cast<torch::optim::SGDParamState&>(*sgd.state().at(p.unsafeGetTensorImpl())).momentum_buffer();
  }

  // The weights, then the momentum: one flat vector.
  std::vector<float> state() {
    std::vector<float> out = tensors.flat();
    for (const torch::Tensor& p : tensors.parameters) {
      const torch::Tensor& m = momentum_of(p);
      out.insert(out.end(), m.data_ptr<float>(), m.data_ptr<float>() + m.numel());
    }
    return out;
  }

  void load(std::span<const float> state, const hyper& now) {
    const std::size_t half = state.size() / 2;
    tensors.assign(state.first(half));
    std::size_t at = half;
    for (const torch::Tensor& p : tensors.parameters) {
      torch::Tensor& m = momentum_of(p);
      std::copy_n(state.begin() + static_cast<std::ptrdiff_t>(at), m.numel(), m.data_ptr<float>());
      at += static_cast<std::size_t>(m.numel());
    }
    chosen = now;
    auto& options = static_cast<torch::optim::SGDOptions&>(sgd.param_groups().at(0).options());
    options.lr(now.lr).momentum(now.momentum);
  }
};

// The bottom quarter copies the top quarter (every rank decides the same
// from the gathered AUCs); returns {copier: source}.
std::map<int, int> exploit(chorus::communicator& world, member& mine, const std::vector<double>& aucs,
                           const std::vector<hyper>& hypers, int epoch, std::int64_t seed) {
  std::vector<int> ranked(aucs.size());
  std::iota(ranked.begin(), ranked.end(), 0);
  std::stable_sort(ranked.begin(), ranked.end(), [&](int a, int b) { return aucs[a] > aucs[b]; });
  const std::size_t quarter = std::max<std::size_t>(1, ranked.size() / 4);
  std::map<int, int> copies;
  for (std::size_t k = 0; k < quarter; ++k)
    if (ranked[ranked.size() - 1 - k] != ranked[k]) copies[ranked[ranked.size() - 1 - k]] = ranked[k];
  std::vector<float> state = mine.state();
  const int me = mine.index;  // member m's first rank is world rank m
  if (mine.comm.rank() == 0) {
    for (const auto& [copier, source] : copies)
      if (source == me) world.send(std::span<const float>(state), copier, exploit_tag);
    if (copies.contains(me)) world.recv(std::span(state), copies.at(me), exploit_tag);
  }
  if (copies.contains(me)) {
    chorus::broadcast(mine.comm, std::span(state), 0);
    mine.load(state, perturbed(hypers[copies.at(me)], seed, epoch, me));
  }
  return copies;
}

void dump(chorus::communicator& world, member& mine, const std::string& path) {
  const std::vector<float> state = mine.state();
  std::vector<float> states(state.size() * static_cast<std::size_t>(world.size()));
  chorus::allgather(world, std::span<const float>(state), std::span(states));
  std::vector<std::int64_t> members(static_cast<std::size_t>(world.size()));
  const std::int64_t index = mine.index;
  chorus::allgather(world, std::span<const std::int64_t>(&index, 1), std::span(members));
  if (world.rank() != 0) return;
  npz::write(path, {{"states", npz::array::of<float>({members.size(), state.size()}, states)},
                    {"members", npz::array::of<std::int64_t>({members.size()}, members)}});
}

void search(chorus::communicator& world, const settings& config) {
  if (config.members < 1 || config.members > world.size())
    throw std::invalid_argument("--members: 1 to the " + std::to_string(world.size()) + " ranks");
  const int index = world.rank() % config.members;
  chorus::communicator comm = world.split(index, world.rank());
  const jets::sample data = jets::load(config.data, config.model, config.test_fraction);
  member mine(index, comm, config);
  const auto started = std::chrono::steady_clock::now();
  std::ofstream csv;
  if (world.rank() == 0 && !config.csv.empty()) {
    const bool fresh = !std::filesystem::exists(config.csv);
    csv.open(config.csv, std::ios::app);
    if (fresh) csv << "mode,epoch,wall_s,member,auc,rejection_at_50,lr,momentum,copied_from\n";
  }
  std::vector<double> aucs(static_cast<std::size_t>(config.members));
  std::vector<hyper> hypers(aucs.size());
  for (int epoch = 1; epoch <= config.epochs; ++epoch) {
    mine.epoch(epoch, data);
    const jets::figures f = comm.rank() == 0 ? jets::evaluate(mine.model, data) : jets::figures{};
    const std::array<double, 4> row{f.auc, f.rejection_at_50, mine.chosen.lr, mine.chosen.momentum};
    std::vector<double> everyone(4 * static_cast<std::size_t>(world.size()));
    chorus::allgather(world, std::span<const double>(row), std::span(everyone));  // rows 0..members-1: the leaders
    for (std::size_t m = 0; m < aucs.size(); ++m) {
      aucs[m] = everyone[4 * m];
      hypers[m] = {everyone[4 * m + 2], everyone[4 * m + 3]};
    }
    std::map<int, int> copies;
    if (config.mode == "pbt" && epoch % config.exploit_every == 0)
      copies = exploit(world, mine, aucs, hypers, epoch, config.seed);
    if (world.rank() != 0) continue;
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    for (std::size_t m = 0; m < aucs.size(); ++m) {
      const int source = copies.contains(int(m)) ? copies.at(int(m)) : -1;
      std::string note;
      if (source >= 0) {
        const hyper now = perturbed(hypers[static_cast<std::size_t>(source)], config.seed, epoch, int(m));
        char text[128];
        std::snprintf(text, sizeof text, ", then copies member %d (lr %.4g, momentum %.3f)", source, now.lr,
                      now.momentum);
        note = text;
      }
      std::printf("epoch %d: member %zu: auc %.4f, rejection_at_50 %.1f, lr %.4g, momentum %.3f%s\n", epoch, m, aucs[m],
                  everyone[4 * m + 1], hypers[m].lr, hypers[m].momentum, note.c_str());
      if (csv.is_open()) {
        char line[256];
        std::snprintf(line, sizeof line, "%s,%d,%.2f,%zu,%.4f,%.2f,%.6g,%.4f,%d\n", config.mode.c_str(), epoch, wall, m,
                      aucs[m], everyone[4 * m + 1], hypers[m].lr, hypers[m].momentum, source);
        csv << line << std::flush;
      }
    }
    std::fflush(stdout);
  }
  const auto best = static_cast<std::size_t>(std::max_element(aucs.begin(), aucs.end()) - aucs.begin());
  if (world.rank() == 0)
    std::printf("%s: best member %zu: auc %.4f, lr %.4g, momentum %.3f, %.1f s\n", config.mode.c_str(), best,
                aucs[best], hypers[best].lr, hypers[best].momentum,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  if (!config.dump.empty()) dump(world, mine, config.dump);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const settings config = parse(argc, argv);
    chorus::communicator world = chorus::init();
    if (std::getenv("OMP_NUM_THREADS") == nullptr)
      torch::set_num_threads(std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / world.size()));
    search(world, config);
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "jet_pbt: %s\n", failure.what());
    return 1;
  }
}
