// Data-parallel training of an MLP on Fashion-MNIST with any averaging
// scheme of chorus. Run under chorus-run:
//
//   chorus-run -n 4 fashion_mnist --scheme dpsgd --codec fp16 --epochs 12 --csv dpsgd.csv
//
// Each rank trains on its shard (every n-th image), takes its gradient and
// its own SGD step (Nesterov momentum); the scheme does the rest. Rank 0
// prints, per epoch, the test accuracy of the model it holds (allreduce-SGD:
// the replica; EASGD: the centre; the others: rank 0's local model), the
// wall time and the bytes it has sent, and at the end the accuracy of the
// model a user would keep after finish(): the average (local SGD, D-PSGD),
// the centre (EASGD) or the consensus (GoSGD).
#include <chorus/chorus.hpp>

#include "dataset.hpp"
#include "mlp.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <iostream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace avg = chorus::averaging;

namespace {

struct settings {
  std::string scheme = "allreduce";  // allreduce | local | dpsgd | easgd | easgd-sync | gosgd
  std::string codec = "none";
  std::string directory = fashion_mnist::default_directory;
  std::string csv;
  int epochs = 12;
  std::size_t batch = 32;           // per rank
  double learning_rate = 0.02;
  double momentum = 0.9;
  std::uint64_t period = 8;         // local SGD H
  double alpha = 0.1;               // EASGD elastic force
  std::uint64_t tau = 4;            // EASGD steps between elastic updates
  double push_probability = 0.5;    // GoSGD p
};

// An empty problem is --help: the usage on stdout, exit status 0.
[[noreturn]] void usage(const std::string& problem) {
  std::ostream& out = problem.empty() ? std::cout : std::cerr;
  if (!problem.empty()) out << problem << "\n";
  out << "usage: fashion_mnist [--scheme allreduce|local|dpsgd|easgd|easgd-sync|gosgd]"
               " [--codec none|fp16|bf16|int8|onebit] [--epochs N] [--batch B] [--lr X] [--momentum X]"
               " [--period H] [--alpha X] [--tau T] [--p X] [--data DIR] [--csv FILE]\n"
         "Trains an MLP on Fashion-MNIST with one averaging scheme, e.g.\n"
         "  chorus-run -n 4 fashion_mnist --scheme gosgd --epochs 12 --csv gosgd.csv\n";
  std::exit(problem.empty() ? 0 : 2);
}

settings parse(int argc, char** argv) {
  settings chosen;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage("");
    if (i + 1 >= argc) usage("missing value after " + flag);
    const std::string value = argv[++i];
    if (flag == "--scheme") chosen.scheme = value;
    else if (flag == "--codec") chosen.codec = value;
    else if (flag == "--epochs") chosen.epochs = std::stoi(value);
    else if (flag == "--batch") chosen.batch = std::stoul(value);
    else if (flag == "--lr") chosen.learning_rate = std::stod(value);
    else if (flag == "--momentum") chosen.momentum = std::stod(value);
    else if (flag == "--period") chosen.period = std::stoul(value);
    else if (flag == "--alpha") chosen.alpha = std::stod(value);
    else if (flag == "--tau") chosen.tau = std::stoul(value);
    else if (flag == "--p") chosen.push_probability = std::stod(value);
    else if (flag == "--data") chosen.directory = value;
    else if (flag == "--csv") chosen.csv = value;
    else usage("unknown flag " + flag);
  }
  return chosen;
}

struct trainer {
  chorus::communicator& comm;
  const settings& config;
  fashion_mnist::split train, test;
  fashion_mnist::mlp model{2026};  // the same initial model on every rank
  std::vector<std::size_t> shard;
  std::mt19937_64 random;
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::ofstream csv;

  trainer(chorus::communicator& c, const settings& s)
      : comm(c), config(s), train(fashion_mnist::load(s.directory, "train")), test(fashion_mnist::load(s.directory, "t10k")),
        random(1234 + static_cast<std::uint64_t>(c.rank())) {
    for (std::size_t i = static_cast<std::size_t>(comm.rank()); i < train.size(); i += static_cast<std::size_t>(comm.size()))
      shard.push_back(i);
    if (comm.rank() == 0 && !config.csv.empty()) {
      csv.open(config.csv);
      csv << "scheme,codec,ranks,epoch,wall_s,test_accuracy,test_loss,bytes_sent_rank0\n";
    }
  }

  std::size_t steps_per_epoch() const { return shard.size() / config.batch; }

  // Trains `epochs` epochs with the scheme; `held` is the model rank 0
  // evaluates after each epoch.
  template <class Scheme>
  void run(Scheme& scheme, const std::function<std::vector<float>()>& held) {
    avg::sgd optimiser(avg::parameters(model.tensors()), {.learning_rate = config.learning_rate, .momentum = config.momentum, .nesterov = true});
    const avg::parameters gradients(model.gradient_tensors());
    std::vector<float> images(config.batch * fashion_mnist::pixels);
    std::vector<std::uint8_t> labels(config.batch);
    for (int epoch = 1; epoch <= config.epochs; ++epoch) {
      // Cosine decay of the learning rate over the run.
      const double progress = static_cast<double>(epoch - 1) / config.epochs;
      optimiser.set_learning_rate(config.learning_rate * 0.5 * (1 + std::cos(3.14159265358979 * progress)));
      std::shuffle(shard.begin(), shard.end(), random);
      for (std::size_t step = 0; step < steps_per_epoch(); ++step) {
        for (std::size_t b = 0; b < config.batch; ++b) {
          const std::size_t sample = shard[step * config.batch + b];
          std::copy_n(train.images.begin() + static_cast<std::ptrdiff_t>(sample * fashion_mnist::pixels), fashion_mnist::pixels,
                      images.begin() + static_cast<std::ptrdiff_t>(b * fashion_mnist::pixels));
          labels[b] = train.labels[sample];
        }
        scheme.step([&] { model.train_batch(images, labels); }, [&] { optimiser.apply(gradients); });
      }
      if (comm.rank() == 0) report(std::to_string(epoch), held(), scheme.stats());
    }
    scheme.finish();
    const std::vector<float> kept(model.values().begin(), model.values().end());
    if (comm.rank() == 0) {
      const double accuracy = report("final", kept, scheme.stats());
      std::printf("final test accuracy: %.4f\n", accuracy);
    }
  }

  double report(const std::string& epoch, std::span<const float> parameters, const avg::averaging_stats& stats) {
    const auto [correct, loss] = model.evaluate(parameters, test.images, test.labels);
    const double accuracy = static_cast<double>(correct) / static_cast<double>(test.size());
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("epoch %-5s  test accuracy %.4f  loss %.4f  wall %7.1f s  sent %8.1f MB  (%s, %s, %d ranks)\n",
                epoch.c_str(), accuracy, loss / static_cast<double>(test.size()), wall,
                static_cast<double>(stats.bytes_sent) / 1e6, config.scheme.c_str(), config.codec.c_str(), comm.size());
    std::fflush(stdout);
    if (csv.is_open())
      csv << config.scheme << ',' << config.codec << ',' << comm.size() << ',' << epoch << ',' << wall << ',' << accuracy << ','
          << loss / static_cast<double>(test.size()) << ',' << stats.bytes_sent << '\n' << std::flush;
    return accuracy;
  }
};

std::vector<float> copy_of(std::span<const float> values) { return {values.begin(), values.end()}; }

void train(chorus::communicator& comm, const settings& config) {
  trainer job(comm, config);
  const avg::parameters model(job.model.tensors());
  const chorus::codec::any_codec wire = chorus::codec::by_name(config.codec);
  const auto local_model = [&] { return copy_of(job.model.values()); };
  if (config.scheme == "allreduce") {
    avg::allreduce_sgd scheme(comm, model, avg::parameters(job.model.gradient_tensors()), {.codec = wire});
    job.run(scheme, local_model);
  } else if (config.scheme == "local") {
    avg::local_sgd scheme(comm, model, {.period = config.period, .codec = wire});
    job.run(scheme, local_model);
  } else if (config.scheme == "dpsgd") {
    avg::dpsgd scheme(comm, model, {.codec = wire});
    job.run(scheme, local_model);
  } else if (config.scheme == "easgd-sync") {
    avg::easgd scheme(comm, model, {.alpha = config.alpha, .tau = config.tau, .codec = wire});
    job.run(scheme, [&] { return copy_of(scheme.centre()); });
  } else if (config.scheme == "easgd") {
    if (wire) throw chorus::error(chorus::errc::invalid_argument, "easgd (asynchronous) sends full-precision models; use --codec none");
    avg::easgd_async scheme(comm, model, {.alpha = config.alpha, .tau = config.tau, .server = 0});
    job.run(scheme, [&] { return scheme.centre_snapshot(); });
  } else if (config.scheme == "gosgd") {
    avg::gosgd scheme(comm, model, {.push_probability = config.push_probability, .codec = wire});
    job.run(scheme, local_model);
  } else {
    usage("unknown scheme " + config.scheme);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const settings config = parse(argc, argv);
  try {
    chorus::communicator comm = chorus::init();
    train(comm, config);
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "fashion_mnist: %s\n", failure.what());
    return 1;
  }
}
