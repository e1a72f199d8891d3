// The W-jet tagger trained in C++ with LibTorch and chorus, no Python at
// run time: the model's own tensors go to chorus's averaging schemes. The
// same networks, data, shuffles, optimiser and report as
// examples/python/train_jet_tagger.py (and its harness, dataparallel.py),
// so the two are compared run for run:
//
//   chorus-run -n 4 build/examples/jet_tagger --data jets.npz --scheme allreduce
//   chorus-run -n 4 build/examples/jet_tagger --data jets.npz --scheme dpsgd --codec fp16 --model deepsets
//
// Rank 0 prints, per epoch, the held-out ROC AUC and the rejection at 50%
// W efficiency of the model it holds (its replica; the centre for EASGD),
// the wall time and the bytes its rank sent, and at the end `final auc:`
// and `final rejection_at_50:` of the model to keep (after finish(): the
// average, the centre or the consensus). --csv appends the Python
// trainer's columns (backend "libtorch").
#include <chorus/chorus.hpp>

#include "tagger.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <string>
#include <thread>

namespace avg = chorus::averaging;

namespace {

struct settings {
  std::string data = "jets.npz", model = "cnn", scheme = "allreduce", codec = "none", csv, scores;
  int epochs = 10, period = 4;
  double round_seconds = 0;         // DiLoCo's rounds by compute time ...
  std::uint64_t round_samples = 0;  // ... or by the job's samples; the epochs are then the job's
  std::int64_t batch = 128, seed = 0;
  double learning_rate = 0.05, test_fraction = 0.2;
};

const char* const usage_text =
    "usage: jet_tagger [--data FILE] [--model cnn|deepsets] [--scheme allreduce|local|dpsgd|dpsgd-window|"
    "easgd-sync|easgd|gosgd|one-sided-gossip|tree-easgd|diloco|streaming-diloco] "
    "[--codec none|fp16|bf16|int8|fp8_e4m3|fp4_e2m1|onebit] [--epochs N] "
    "[--batch B] [--lr X] [--period H] [--round-seconds T] [--round-samples N] [--seed S] [--test-fraction F] "
    "[--csv FILE] [--scores FILE]\n"
    "Trains the W-jet tagger on generate_jets.py's file with a chorus scheme, under chorus-run.\n"
    "--scores FILE: rank 0 saves the final held-out scores and labels (.npz: ROC curves).\n";

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::cout << usage_text;
      std::exit(0);
    }
    if (i + 1 >= argc) throw std::invalid_argument("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--data")
      s.data = value;
    else if (flag == "--model")
      s.model = value;
    else if (flag == "--scheme")
      s.scheme = value;
    else if (flag == "--codec")
      s.codec = value;
    else if (flag == "--csv")
      s.csv = value;
    else if (flag == "--scores")
      s.scores = value;
    else if (flag == "--epochs")
      s.epochs = std::stoi(value);
    else if (flag == "--period")
      s.period = std::stoi(value);
    else if (flag == "--round-seconds")
      s.round_seconds = std::stod(value);
    else if (flag == "--round-samples")
      s.round_samples = std::stoull(value);
    else if (flag == "--batch")
      s.batch = std::stoll(value);
    else if (flag == "--seed")
      s.seed = std::stoll(value);
    else if (flag == "--lr")
      s.learning_rate = std::stod(value);
    else if (flag == "--test-fraction")
      s.test_fraction = std::stod(value);
    else
      throw std::invalid_argument("unknown flag " + flag + "\n" + usage_text);
  }
  return s;
}

// LibTorch's threads: OMP_NUM_THREADS where set, else this host's cores shared by the ranks.
void share_the_cores(const chorus::communicator& comm) {
  if (std::getenv("OMP_NUM_THREADS") != nullptr) return;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(std::max(1, cores / comm.size()));
}

struct trainer {
  chorus::communicator& comm;
  const settings& config;
  jets::sample data;
  jets::network model;
  jets::tensors tensors;
  torch::optim::SGD sgd;
  std::uint64_t samples = 0;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();

  trainer(chorus::communicator& c, const settings& s)
      : comm(c),
        config(s),
        data(jets::load(s.data, s.model, s.test_fraction)),
        model(jets::model_named(s.model)),
        tensors(model),
        sgd(tensors.parameters, torch::optim::SGDOptions(s.learning_rate).momentum(0.9).nesterov(true)) {}

  jets::slice mine() const { return {comm.rank(), comm.size(), config.batch, config.seed}; }
  double wall() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(); }

  // Rank 0's figures for the parameters given (the model's own when empty).
  jets::figures evaluate(const std::vector<float>& held) {
    if (held.empty()) return jets::evaluate(model, data);
    const std::vector<float> own = tensors.flat();
    tensors.assign(held);
    const jets::figures figures = jets::evaluate(model, data);
    tensors.assign(own);
    return figures;
  }

  void report(const std::string& epoch, const jets::figures& f, std::uint64_t bytes) const {
    std::printf("epoch %s: auc %.4f, rejection_at_50 %.4f, wall %.1f s, sent %.1f MB\n", epoch.c_str(), f.auc,
                f.rejection_at_50, wall(), static_cast<double>(bytes) / 1e6);
    std::fflush(stdout);
    if (config.csv.empty()) return;
    const bool fresh = !std::filesystem::exists(config.csv);
    std::ofstream out(config.csv, std::ios::app);
    if (fresh) out << "backend,scheme,hook,codec,ranks,epoch,wall_s,auc,rejection_at_50,bytes_rank0\n";
    char row[256];
    std::snprintf(row, sizeof row, "libtorch,%s,none,%s,%d,%s,%.2f,%.4f,%.4f,%llu\n", config.scheme.c_str(),
                  config.codec.c_str(), comm.size(), epoch.c_str(), wall(), f.auc, f.rejection_at_50,
                  static_cast<unsigned long long>(bytes));
    out << row;
  }

  void save_scores(const std::vector<double>& scores, const std::vector<int>& labels) const {
    const std::vector<std::uint8_t> bytes(labels.begin(), labels.end());
    npz::write(config.scores, {{"scores", npz::array::of<double>({scores.size()}, scores)},
                               {"labels", npz::array::of<std::uint8_t>({bytes.size()}, bytes)}});
  }

  // Every epoch, then finish(); `held` is the model rank 0 reports after an
  // epoch (empty: its replica).
  template <class Scheme>
  void run(Scheme& scheme, const std::function<std::vector<float>()>& held) {
    if (comm.rank() == 0)
      std::printf(
          "jet tagger (%s, C++ LibTorch): %d ranks, scheme %s/%s, %d epochs of %lld steps, %lld jets held "
          "out\n",
          config.model.c_str(), comm.size(), config.scheme.c_str(), config.codec.c_str(), config.epochs,
          static_cast<long long>(mine().steps(data)), static_cast<long long>(data.test_labels.size(0)));
    jets::pass_cursor cursor;
    const auto epoch_samples = static_cast<std::uint64_t>(data.train_labels.size(0));
    const auto one_epoch = [&](int number) -> std::int64_t {
      if constexpr (requires { scheme.job_samples(); })
        if (config.round_seconds > 0 || config.round_samples > 0)  // an epoch ends when the job has processed
                                                                   // the training set once more
          return jets::train_until_job(scheme, model, tensors, sgd, data, mine(), (number + 1) * epoch_samples, cursor);
      return jets::train_epoch(scheme, model, tensors, sgd, data, mine(), number);
    };
    for (int number = 0; number < config.epochs; ++number) {
      samples += static_cast<std::uint64_t>(one_epoch(number));
      if (comm.rank() == 0) report(std::to_string(number + 1), evaluate(held()), scheme.stats().bytes_sent);
    }
    const double trained = wall();
    std::printf("rank %d: %llu samples in %.1f s, %.0f samples/s\n", comm.rank(),
                static_cast<unsigned long long>(samples), trained, static_cast<double>(samples) / trained);
    std::fflush(stdout);
    scheme.finish();
    if (comm.rank() != 0) return;
    const std::vector<double> scores = jets::scores_of(model, data.test_inputs);
    const std::vector<int> labels = jets::labels_of(data.test_labels);
    std::printf("final auc: %.4f\nfinal rejection_at_50: %.4f\n", jets::roc_auc(scores, labels),
                jets::rejection_at(scores, labels));
    if (!config.scores.empty()) save_scores(scores, labels);
  }
};

// The scheme by name, with the Python harness's settings (dataparallel.py's make_scheme).
void train(chorus::communicator& comm, const settings& config) {
  trainer job(comm, config);
  const avg::parameters model(job.tensors.values());
  const chorus::codec::any_codec wire = chorus::codec::by_name(config.codec);
  const auto replica = [] { return std::vector<float>{}; };
  const std::string& s = config.scheme;
  if (s == "allreduce") {
    avg::allreduce_sgd scheme(comm, model, avg::parameters(job.tensors.gradients()), {.codec = wire});
    job.run(scheme, replica);
  } else if (s == "local") {
    avg::local_sgd scheme(comm, model, {.period = static_cast<std::uint64_t>(config.period), .codec = wire});
    job.run(scheme, replica);
  } else if (s == "diloco" || s == "streaming-diloco") {
    // As dataparallel.py: outer Nesterov SGD 0.7 / 0.9; streaming in 4 fragments, each overlapping one step.
    const auto period = static_cast<std::uint64_t>(config.period);
    const bool streaming = s == "streaming-diloco";
    avg::diloco scheme(comm, model,
                       {.period = period,
                        .round_seconds = config.round_seconds,
                        .round_samples = config.round_samples,
                        .codec = wire,
                        .fragments = streaming ? std::min<std::size_t>(4, model.tensors().size()) : 1,
                        .overlap_steps = streaming && period > 1 ? 1u : 0u});
    job.run(scheme, replica);
  } else if (s == "dpsgd" || s == "dpsgd-window") {
    avg::dpsgd scheme(comm, model, {.codec = wire, .one_sided = s == "dpsgd-window"});
    job.run(scheme, replica);
  } else if (s == "one-sided-gossip") {
    avg::one_sided_gossip scheme(comm, model, {.codec = wire});
    job.run(scheme, replica);
  } else if (s == "easgd-sync") {
    avg::easgd scheme(comm, model, {.alpha = 0.1, .tau = 1, .codec = wire});
    job.run(scheme, [&] {
      const auto centre = scheme.centre();
      return std::vector<float>(centre.begin(), centre.end());
    });
  } else if (s == "easgd") {
    if (wire) throw std::invalid_argument("easgd (asynchronous) sends full-precision models; use --codec none");
    avg::easgd_async scheme(comm, model, {.alpha = 0.1, .tau = 4, .server = 0});
    job.run(scheme, [&] { return scheme.centre_snapshot(); });
  } else if (s == "tree-easgd") {
    avg::tree_easgd scheme(comm, model, {.alpha = 0.1, .tau_up = 4, .tau_down = 4});
    job.run(scheme, replica);
  } else if (s == "gosgd") {
    avg::gosgd scheme(comm, model, {.push_probability = 0.5, .codec = wire});
    job.run(scheme, replica);
  } else {
    throw std::invalid_argument("unknown scheme " + s + "\n" + usage_text);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const settings config = parse(argc, argv);
    chorus::communicator comm = chorus::init();
    share_the_cores(comm);
    train(comm, config);
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "jet_tagger: %s\n", failure.what());
    return 1;
  }
}
