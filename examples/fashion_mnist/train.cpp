// Data-parallel training of an MLP on Fashion-MNIST with any averaging
// scheme of chorus. Run under chorus-run:
//
//   chorus-run -n 4 fashion_mnist --scheme dpsgd --codec fp16 --epochs 12 --csv dpsgd.csv
//
// Each rank trains on its shard (every n-th image), takes its gradient and
// its own SGD step (Nesterov momentum); the scheme does the rest. With a
// parameter server (ps-bsp, ssp, downpour) the servers take that step on
// their shards (the same Nesterov SGD) and the local step runs only between
// Downpour's fetches. Rank 0 prints, per epoch, the test accuracy of the
// model it holds (allreduce-SGD: the replica; EASGD: the centre; TreeEASGD:
// the root's; the others: rank 0's local model), the wall time and the
// bytes it has sent, and at the end the accuracy of the model a user would
// keep after finish(): the average (local SGD, D-PSGD), the centre (EASGD),
// the root's (TreeEASGD), the servers' (parameter server) or the consensus
// (GoSGD). Rank 0 evaluates each epoch's model on a thread and a model of
// its own, as an evaluator beside the job would, so that no rank waits on
// the evaluation at the next sync; a row's wall time is when its epoch
// ended. Every rank prints the seconds it computed and its utilisation
// (computing over wall time); the CSV keeps rank 0's.
#include <chorus/chorus.hpp>

#include "dataset.hpp"
#include "mlp.hpp"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <iostream>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace avg = chorus::averaging;

namespace {

struct settings {
  std::string scheme = "allreduce";  // one of scheme_names below
  std::string codec = "none";
  std::string directory = fashion_mnist::default_directory;
  std::string csv;
  int epochs = 12;
  std::size_t batch = 32;  // per rank
  double learning_rate = 0.02;
  double momentum = 0.9;
  std::uint64_t period = 8;                  // local SGD's and DiLoCo's H
  double outer_lr = 0.7;                     // DiLoCo's outer SGD
  double outer_momentum = 0.9;               // ... its Nesterov momentum
  std::size_t fragments = 4;                 // streaming-diloco's P
  std::uint64_t overlap = 1;                 // streaming-diloco's tau
  double mixing = 0.0;                       // streaming-diloco's alpha: the local share of a merged fragment
  double round_seconds = 0;                  // DiLoCo's rounds by compute time ...
  std::uint64_t round_samples = 0;           // ... or by the job's samples; the epochs are then the job's
  bool job_epochs = false;                   // --epochs-of job: an asynchronous scheme's epochs are the job's
  double alpha = 0.1;                        // EASGD elastic force
  std::uint64_t tau = 4;                     // EASGD steps between elastic updates
  double push_probability = 0.5;             // GoSGD p
  std::uint64_t staleness = 3;               // SSP s
  std::uint64_t push_every = 1;              // Downpour n_push
  std::uint64_t fetch_every = 1;             // Downpour n_fetch
  int fanout = 2;                            // TreeEASGD d
  std::string on_peer_failure;               // raise | continue; continue where a rank is killed
  int kill_rank = -1;                        // the fault demonstration: this rank SIGKILLs itself
  std::uint64_t kill_at_step = 0;            // ... at this step (counted over the run)
  avg::heterogeneity_options heterogeneity;  // --slow, --jitter, --seed
  int leave_rank = -1;                       // --leave RANK:EPOCH: this rank leaves on purpose
  int leave_after_epoch = 0;                 // ... after this epoch
  int join_epochs = 0;                       // a process that joined (chorus-run --join) trains this many; 0: half
};

const char* const scheme_names =
    "allreduce|local|dpsgd|dpsgd-window|easgd|easgd-sync|gosgd|one-sided-gossip|ps-bsp|ssp|downpour|downpour-get|"
    "downpour-accumulate|tree-easgd|diloco|streaming-diloco";

// An empty problem is --help: the usage on stdout, exit status 0.
[[noreturn]] void usage(const std::string& problem) {
  std::ostream& out = problem.empty() ? std::cout : std::cerr;
  if (!problem.empty()) out << problem << "\n";
  out << "usage: fashion_mnist [--scheme " << scheme_names
      << "]"
         " [--codec none|fp16|bf16|int8|fp8_e4m3|fp4_e2m1|onebit|topk:R|randomk:R|powersgd:R] [--epochs N]"
         " [--batch B] [--lr X] "
         "[--momentum X]"
         " [--period H] [--outer-lr X] [--outer-momentum X] [--fragments P] [--overlap T] [--mixing A]"
         " [--round-seconds T]"
         " [--round-samples N] [--epochs-of rank|job] [--alpha X] [--tau T] [--p "
         "X] [--staleness S] [--push-every N] [--fetch-every N]"
         " [--fanout D] [--on-peer-failure raise|continue] [--kill-rank R --kill-at-step S]"
         " [--slow RANK:FACTOR]... [--jitter none|exponential:MEAN_MS|pareto:SCALE_MS:ALPHA|lognormal:MEDIAN_MS:SIGMA]"
         " [--seed S] [--leave RANK:EPOCH] [--join-epochs N] [--data DIR] [--csv FILE]\n"
         "Trains an MLP on Fashion-MNIST with one averaging scheme, e.g.\n"
         "  chorus-run -n 4 fashion_mnist --scheme gosgd --epochs 12 --csv gosgd.csv\n"
         "With --kill-rank R (not 0: it reports) rank R kills itself at step S, to show training that survives\n"
         "a lost worker (gosgd, one-sided-gossip, easgd, ssp, downpour, diloco, streaming-diloco; run under\n"
         "chorus-run --keep-going).\n"
         "--slow R:F makes rank R's steps take F times as long (a sleep of F - 1 times its compute after each);\n"
         "--jitter adds a heavy-tailed delay to every rank's steps; --seed S (default 1234) seeds the jitter and\n"
         "the shuffles, so a run is reproducible. --leave R:E: rank R leaves on purpose after epoch E (gosgd,\n"
         "easgd, diloco; its share goes to the others, who finish without it). A process started into the running\n"
         "job (chorus-run --join K@SECONDS; gosgd, easgd, ssp, downpour, diloco) trains the last --join-epochs N\n"
         "epochs (default half) of the schedule, starting from the model the job hands it. DiLoCo with\n"
         "--round-seconds T or --round-samples N ends its rounds by compute time or by the job's samples: a fast\n"
         "rank takes more steps, each model counts by its samples, and an epoch ends when the job has processed\n"
         "the training set.\n"
         "--epochs-of job does the same for gosgd, one-sided-gossip and easgd, counting the job's samples in the\n"
         "job's store (averaging/job_progress.hpp); the learning rate's cosine then follows the job's samples.\n";
  std::exit(problem.empty() ? 0 : 2);
}

// One flag and its value into `chosen`.
void set(settings& chosen, const std::string& flag, const std::string& value) {
  if (flag == "--scheme")
    chosen.scheme = value;
  else if (flag == "--codec")
    chosen.codec = value;
  else if (flag == "--epochs")
    chosen.epochs = std::stoi(value);
  else if (flag == "--batch")
    chosen.batch = std::stoul(value);
  else if (flag == "--lr")
    chosen.learning_rate = std::stod(value);
  else if (flag == "--momentum")
    chosen.momentum = std::stod(value);
  else if (flag == "--period")
    chosen.period = std::stoul(value);
  else if (flag == "--outer-lr")
    chosen.outer_lr = std::stod(value);
  else if (flag == "--outer-momentum")
    chosen.outer_momentum = std::stod(value);
  else if (flag == "--fragments")
    chosen.fragments = std::stoul(value);
  else if (flag == "--round-seconds")
    chosen.round_seconds = std::stod(value);
  else if (flag == "--round-samples")
    chosen.round_samples = std::stoul(value);
  else if (flag == "--epochs-of") {
    if (value != "job" && value != "rank") usage("--epochs-of is job or rank");
    chosen.job_epochs = value == "job";
  }
  else if (flag == "--overlap")
    chosen.overlap = std::stoul(value);
  else if (flag == "--mixing")
    chosen.mixing = std::stod(value);
  else if (flag == "--alpha")
    chosen.alpha = std::stod(value);
  else if (flag == "--tau")
    chosen.tau = std::stoul(value);
  else if (flag == "--p")
    chosen.push_probability = std::stod(value);
  else if (flag == "--staleness")
    chosen.staleness = std::stoul(value);
  else if (flag == "--push-every")
    chosen.push_every = std::stoul(value);
  else if (flag == "--fetch-every")
    chosen.fetch_every = std::stoul(value);
  else if (flag == "--fanout")
    chosen.fanout = std::stoi(value);
  else if (flag == "--on-peer-failure")
    chosen.on_peer_failure = value;
  else if (flag == "--join-epochs")
    chosen.join_epochs = std::stoi(value);
  else if (flag == "--kill-rank")
    chosen.kill_rank = std::stoi(value);
  else if (flag == "--kill-at-step")
    chosen.kill_at_step = std::stoul(value);
  else if (flag == "--leave") {
    const std::size_t colon = value.find(':');
    if (colon == std::string::npos) usage("--leave is RANK:EPOCH");
    chosen.leave_rank = std::stoi(value.substr(0, colon));
    chosen.leave_after_epoch = std::stoi(value.substr(colon + 1));
  } else if (flag == "--slow")
    chosen.heterogeneity.slow.push_back(avg::slow_rank_from(value));
  else if (flag == "--jitter")
    chosen.heterogeneity.jitter = avg::jitter_from(value);
  else if (flag == "--seed")
    chosen.heterogeneity.seed = std::stoull(value);
  else if (flag == "--data")
    chosen.directory = value;
  else if (flag == "--csv")
    chosen.csv = value;
  else
    usage("unknown flag " + flag);
}

settings parse(int argc, char** argv) {
  settings chosen;
  chosen.heterogeneity.seed = 1234;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") usage("");
    if (i + 1 >= argc) usage("missing value after " + flag);
    const std::string value = argv[++i];
    try {
      set(chosen, flag, value);
    } catch (const std::exception& problem) {
      usage(flag + " " + value + ": " + problem.what());
    }
  }
  if (chosen.on_peer_failure.empty()) chosen.on_peer_failure = chosen.kill_rank >= 0 ? "continue" : "raise";
  if (chosen.on_peer_failure != "raise" && chosen.on_peer_failure != "continue")
    usage("--on-peer-failure is raise or continue, not " + chosen.on_peer_failure);
  if (chosen.job_epochs && chosen.scheme != "gosgd" && chosen.scheme != "one-sided-gossip" && chosen.scheme != "easgd")
    usage("--epochs-of job: with gosgd, one-sided-gossip or easgd (a synchronous scheme needs every rank's steps; "
          "DiLoCo counts the job's samples with --round-seconds or --round-samples)");
  if (chosen.kill_rank == 0) usage("--kill-rank 0: rank 0 evaluates and reports; kill another");
  if (chosen.leave_rank == 0) usage("--leave 0:E: rank 0 evaluates and reports; another leaves");
  return chosen;
}

struct trainer {
  chorus::communicator& comm;
  const settings& config;
  fashion_mnist::split train, test;
  fashion_mnist::mlp model{2026};  // the same initial model on every rank
  std::vector<std::size_t> shard;
  std::mt19937_64 random;
  avg::step_delays delays;  // this rank's slowdown and jitter
  std::uint64_t samples = 0;
  double compute_seconds = 0;          // in its own steps: the batch, the model's pass, the optimiser (not the scheme)
  fashion_mnist::mlp evaluator{2026};  // rank 0: the epochs' test evaluations, on a thread of their own
  std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
  std::ofstream csv;
  std::future<void> evaluating;  // the evaluation in flight (after csv: destroyed, so joined, first)

  trainer(chorus::communicator& c, const settings& s)
      : comm(c),
        config(s),
        train(fashion_mnist::load(s.directory, "train")),
        test(fashion_mnist::load(s.directory, "t10k")),
        random(s.heterogeneity.seed + static_cast<std::uint64_t>(c.rank())),
        delays(c.rank(), c.size(), s.heterogeneity) {
    for (std::size_t i = static_cast<std::size_t>(comm.rank()); i < train.size();
         i += static_cast<std::size_t>(comm.size()))
      shard.push_back(i);
    if (comm.rank() == 0 && !config.csv.empty()) {
      csv.open(config.csv);
      csv << "scheme,codec,ranks,epoch,wall_s,test_accuracy,test_loss,bytes_sent_rank0,utilisation_rank0\n";
    }
  }

  std::size_t steps_per_epoch() const { return shard.size() / config.batch; }

  // Trains `epochs` epochs with the scheme; `held` is the model rank 0
  // evaluates after each epoch; `local_step`: whether the trainer's own
  // optimiser step matters (not where a server's replaces the model).
  template <class Scheme>
  void run(Scheme& scheme, const std::function<std::vector<float>()>& held, bool local_step = true) {
    avg::sgd optimiser(avg::parameters(model.tensors()),
                       {.learning_rate = config.learning_rate, .momentum = config.momentum, .nesterov = true});
    const avg::parameters gradients(model.gradient_tensors());
    std::vector<float> images(config.batch * fashion_mnist::pixels);
    std::vector<std::uint8_t> labels(config.batch);
    std::uint64_t steps = 0;
    avg::job_progress job_count(comm, "fashion_mnist");  // --epochs-of job: the job's samples
    // A process that joined the running job trains the schedule's last epochs.
    const int joined_for = config.join_epochs > 0 ? config.join_epochs : std::max(1, config.epochs / 2);
    const int first_epoch = comm.joined() ? std::max(1, config.epochs - joined_for + 1) : 1;
    if (comm.joined())
      std::printf("rank %d: joined the running job; training epochs %d to %d\n", comm.rank(), first_epoch,
                  config.epochs);
    // Cosine decay of the learning rate over the run's progress, in [0, 1].
    const auto set_rate = [&](double progress) {
      const double rate = config.learning_rate * 0.5 * (1 + std::cos(3.14159265358979 * std::min(progress, 1.0)));
      optimiser.set_learning_rate(rate);
      if constexpr (requires { scheme.set_learning_rate(rate); }) scheme.set_learning_rate(rate);
    };
    const auto train_step = [&](std::size_t first) {
      timed(compute_seconds, [&] {
        for (std::size_t b = 0; b < config.batch; ++b) {
          const std::size_t sample = shard[first + b];
          std::copy_n(train.images.begin() + static_cast<std::ptrdiff_t>(sample * fashion_mnist::pixels),
                      fashion_mnist::pixels, images.begin() + static_cast<std::ptrdiff_t>(b * fashion_mnist::pixels));
          labels[b] = train.labels[sample];
        }
      });
      if (comm.rank() == config.kill_rank && steps++ == config.kill_at_step) die();
      scheme.begin_step();
      timed(compute_seconds, [&] { delays.around([&] { model.train_batch(images, labels); }); });
      scheme.reduce_gradients();
      if (local_step) timed(compute_seconds, [&] { optimiser.apply(gradients); });
      if constexpr (requires { scheme.job_samples(); })
        scheme.end_step(config.batch);  // DiLoCo weighs each model by its samples
      else
        scheme.end_step();
      samples += config.batch;
      if (config.job_epochs) job_count.add(config.batch);
    };
    // DiLoCo's rounds by time or samples, or --epochs-of job with an
    // asynchronous scheme: a fast rank takes more steps, so the epochs are
    // the job's (it has processed the training set once more), the
    // learning rate follows the job's samples, and each rank draws batches
    // from its shard round and round.
    bool diloco_counts = false;
    if constexpr (requires { scheme.job_samples(); })
      diloco_counts = config.round_seconds > 0 || config.round_samples > 0;
    const bool by_job = diloco_counts || config.job_epochs;
    std::size_t cursor = steps_per_epoch() * config.batch;
    const auto job_samples = [&]() -> double {
      if constexpr (requires { scheme.job_samples(); })
        if (diloco_counts) return static_cast<double>(scheme.job_samples());
      return static_cast<double>(job_count.samples());
    };
    const double epoch_samples = static_cast<double>(train.size());
    for (int epoch = first_epoch; epoch <= config.epochs; ++epoch) {
      if (!by_job) {
        set_rate(static_cast<double>(epoch - 1) / config.epochs);
        std::shuffle(shard.begin(), shard.end(), random);
        for (std::size_t step = 0; step < steps_per_epoch(); ++step) train_step(step * config.batch);
      } else {
        while (job_samples() < epoch * epoch_samples) {
          if (cursor + config.batch > steps_per_epoch() * config.batch) {
            std::shuffle(shard.begin(), shard.end(), random);
            cursor = 0;
          }
          set_rate(job_samples() / (config.epochs * epoch_samples));
          train_step(cursor);
          cursor += config.batch;
        }
      }
      if (comm.rank() == 0) report_in_background(std::to_string(epoch), held(), scheme.stats());
      if (comm.rank() == config.leave_rank && epoch == config.leave_after_epoch) return leave(scheme);
    }
    const double trained = seconds_since_start();
    scheme.finish();
    report_throughput(trained);
    const std::vector<float> kept(model.values().begin(), model.values().end());
    if (comm.rank() == 0) {
      const double accuracy = report("final", kept, scheme.stats());
      std::printf("final test accuracy: %.4f\n", accuracy);
    }
    if (comm.rank() != 0) return;
    if constexpr (requires { scheme.server_stats(); }) report_server(scheme);
    if constexpr (requires { scheme.lost_peers(); })
      for (const avg::lost_peer& lost : scheme.lost_peers())
        std::printf("lost rank %d: noticed at step %llu, %.1f s in; went on without it\n", lost.rank,
                    static_cast<unsigned long long>(lost.step), lost.seconds);
  }

  // Leaves on purpose (a scheme a worker can leave: the others finish without it).
  template <class Scheme>
  void leave(Scheme& scheme) {
    if constexpr (requires { scheme.leave(); }) {
      const double trained = seconds_since_start();
      scheme.leave();
      std::printf("rank %d: left on purpose after epoch %d\n", comm.rank(), config.leave_after_epoch);
      report_throughput(trained);
    } else {
      throw chorus::error(chorus::errc::invalid_argument,
                          "--leave: " + config.scheme + " cannot be left (gosgd, easgd)");
    }
  }

  // Every rank's own pace over its steps (finish() not counted): what a
  // straggler costs the others shows here.
  double seconds_since_start() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  void report_throughput(double wall) const {
    std::printf(
        "rank %d: %llu samples in %.1f s, %.0f samples/s, slept %.1f s (slowdown %.1fx), computed %.1f s "
        "(utilisation %.3f)\n",
        comm.rank(), static_cast<unsigned long long>(samples), wall, static_cast<double>(samples) / wall,
        delays.slept_seconds(), delays.factor(), compute_seconds, utilisation(wall));
    std::fflush(stdout);
  }

  // The share of the wall time this rank spent computing rather than
  // waiting on the scheme.
  double utilisation(double wall) const { return wall > 0 ? compute_seconds / wall : 0.0; }

  template <class Work>
  static void timed(double& seconds, Work&& work) {
    const auto before = std::chrono::steady_clock::now();
    std::forward<Work>(work)();
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  }

  // The fault demonstration: a crash, no cleanup, no goodbye.
  [[noreturn]] void die() const {
    std::printf("rank %d: killing myself (SIGKILL) at step %llu\n", comm.rank(),
                static_cast<unsigned long long>(config.kill_at_step));
    std::fflush(stdout);
    ::kill(::getpid(), SIGKILL);
    std::abort();
  }

  // Rank 0's shard of the parameter server: every push reaches every
  // shard, so its staleness stands for the others'. (A reduction over the
  // ranks would need every rank alive.)
  template <class Scheme>
  void report_server(const Scheme& scheme) const {
    const avg::shard_stats served = scheme.server_stats();
    std::printf(
        "server (rank 0's shard): %llu gradients applied, staleness mean %.2f max %llu, largest clock gap "
        "served %llu; rank 0 waited %.1f s in %llu pulls\n",
        static_cast<unsigned long long>(served.gradients_applied), served.mean_staleness(),
        static_cast<unsigned long long>(served.staleness_max), static_cast<unsigned long long>(served.clock_gap_max),
        scheme.worker_stats().waited_seconds, static_cast<unsigned long long>(scheme.worker_stats().pulls));
  }

  // What a row reports beside the evaluation, read on the training thread
  // (the evaluator thread touches nothing of the job's).
  struct row_context {
    double wall;
    double used;  // utilisation
    int ranks;
  };
  row_context row_now() const {
    const double wall = seconds_since_start();
    return {wall, utilisation(wall), comm.size()};
  }

  // The epoch's row once the evaluator thread has scored `parameters` (the
  // previous evaluation finishes first, so rows come in order).
  void report_in_background(std::string epoch, std::vector<float> parameters, avg::averaging_stats stats) {
    if (evaluating.valid()) evaluating.get();
    const row_context at = row_now();
    evaluating = std::async(std::launch::async, [this, epoch = std::move(epoch), parameters = std::move(parameters),
                                                 stats, at] { write_row(epoch, parameters, stats, at); });
  }

  double report(const std::string& epoch, std::span<const float> parameters, const avg::averaging_stats& stats) {
    if (evaluating.valid()) evaluating.get();
    return write_row(epoch, parameters, stats, row_now());
  }

  double write_row(const std::string& epoch, std::span<const float> parameters, const avg::averaging_stats& stats,
                   const row_context& at) {
    const auto [correct, loss] = evaluator.evaluate(parameters, test.images, test.labels);
    const double accuracy = static_cast<double>(correct) / static_cast<double>(test.size());
    std::printf("epoch %-5s  test accuracy %.4f  loss %.4f  wall %7.1f s  sent %8.1f MB  (%s, %s, %d ranks)\n",
                epoch.c_str(), accuracy, loss / static_cast<double>(test.size()), at.wall,
                static_cast<double>(stats.bytes_sent) / 1e6, config.scheme.c_str(), config.codec.c_str(), at.ranks);
    std::fflush(stdout);
    if (csv.is_open())
      csv << config.scheme << ',' << config.codec << ',' << at.ranks << ',' << epoch << ',' << at.wall << ','
          << accuracy << ',' << loss / static_cast<double>(test.size()) << ',' << stats.bytes_sent << ',' << at.used
          << '\n'
          << std::flush;
    return accuracy;
  }
};

std::vector<float> copy_of(std::span<const float> values) { return {values.begin(), values.end()}; }

// The tensors cut into pieces of at most about 1/parts of the model, so
// that no strided fragment holds most of it: W1 holds 85% of the MLP, and a
// fragment holding it whole would carry almost every sync's bytes (cut, the
// largest of 4 holds 35%: a piece of W1 and W2). DiLoCo is elementwise, so
// a piece (a view of the same memory) syncs like a tensor.
std::vector<std::span<float>> even_pieces(const std::vector<std::span<float>>& tensors, std::size_t parts) {
  std::size_t total = 0;
  for (const auto& tensor : tensors) total += tensor.size();
  parts = std::max<std::size_t>(parts, 1);
  const std::size_t most = std::max<std::size_t>(1, (total + parts - 1) / parts);
  std::vector<std::span<float>> pieces;
  for (const auto& tensor : tensors) {
    const std::size_t count = std::max<std::size_t>(1, (tensor.size() + most - 1) / most);
    const auto edge = [&](std::size_t i) { return tensor.size() * i / count; };
    for (std::size_t i = 0; i < count; ++i) pieces.push_back(tensor.subspan(edge(i), edge(i + 1) - edge(i)));
  }
  return pieces;
}

// "powersgd:R": PowerSGD at rank R (compressed/powersgd.hpp) instead of a codec.
std::optional<std::size_t> powersgd_rank(const std::string& codec) {
  const std::string prefix = "powersgd:";
  if (codec.rfind(prefix, 0) != 0) return std::nullopt;
  const std::size_t rank = std::stoul(codec.substr(prefix.size()));
  if (rank == 0) usage("--codec powersgd:R takes a rank R >= 1");
  return rank;
}

std::optional<avg::consistency> consistency_named(const std::string& scheme) {
  if (scheme == "ps-bsp") return avg::consistency::bsp;
  if (scheme == "ssp") return avg::consistency::ssp;
  if (scheme == "downpour" || scheme == "downpour-get" || scheme == "downpour-accumulate")
    return avg::consistency::downpour;
  return std::nullopt;
}

void train(chorus::communicator& comm, const settings& config) {
  trainer job(comm, config);
  const avg::parameters model(job.model.tensors());
  const chorus::codec::any_codec wire =
      powersgd_rank(config.codec) ? chorus::codec::any_codec{} : chorus::codec::by_name(config.codec);
  if (powersgd_rank(config.codec) && config.scheme != "allreduce")
    usage("--codec powersgd:R is allreduce-SGD's (--scheme allreduce)");
  const auto local_model = [&] { return copy_of(job.model.values()); };
  const avg::peer_failure_policy on_failure =
      config.on_peer_failure == "continue" ? avg::peer_failure_policy::continue_ : avg::peer_failure_policy::raise;
  const bool tolerant = config.scheme == "gosgd" || config.scheme == "easgd" || config.scheme == "ssp" ||
                        config.scheme == "downpour" || config.scheme == "downpour-get" ||
                        config.scheme == "downpour-accumulate" || config.scheme == "one-sided-gossip" ||
                        config.scheme == "diloco" || config.scheme == "streaming-diloco";
  if (config.leave_rank >= 0 && config.scheme != "gosgd" && config.scheme != "easgd" && config.scheme != "diloco" &&
      config.scheme != "streaming-diloco")
    usage("--leave: " + config.scheme + " cannot be left here (gosgd, easgd, diloco, streaming-diloco)");
  if (config.leave_rank >= comm.size()) usage("--leave: no rank " + std::to_string(config.leave_rank));
  if (on_failure == avg::peer_failure_policy::continue_ && !tolerant)
    usage("--on-peer-failure continue: " + config.scheme +
          " raises on a lost rank (gosgd, one-sided-gossip, easgd, ssp, downpour, diloco, streaming-diloco go on)");
  if (config.scheme == "allreduce") {
    avg::allreduce_sgd_options options{.codec = wire};
    if (const std::optional<std::size_t> rank = powersgd_rank(config.codec)) {
      for (const auto& [rows, cols] : fashion_mnist::mlp::tensor_shapes())
        options.low_rank_shapes.push_back({rows, cols});
      options.low_rank = {.rank = *rank, .seed = config.heterogeneity.seed};
    }
    avg::allreduce_sgd scheme(comm, model, avg::parameters(job.model.gradient_tensors()), options);
    job.run(scheme, local_model);
  } else if (config.scheme == "local") {
    avg::local_sgd scheme(comm, model, {.period = config.period, .codec = wire});
    job.run(scheme, local_model);
  } else if (config.scheme == "diloco" || config.scheme == "streaming-diloco") {
    // DiLoCo: --period inner steps with the trainer's SGD, then the outer step; the outer gradients through
    // --codec with error feedback. Streaming: --fragments strided fragments of the tensors' pieces (even_pieces), each
    // sync overlapping --overlap steps and merged with --mixing.
    const bool streaming = config.scheme == "streaming-diloco";
    const avg::parameters pieces =
        streaming ? avg::parameters(even_pieces(job.model.tensors(), config.fragments)) : model;
    const std::size_t tensors = pieces.tensors().size();
    avg::diloco scheme(comm, pieces,
                       {.period = config.period,
                        .round_seconds = config.round_seconds,
                        .round_samples = config.round_samples,
                        .outer = {.learning_rate = config.outer_lr, .momentum = config.outer_momentum},
                        .codec = wire,
                        .fragments = streaming ? std::min(config.fragments, tensors) : 1,
                        .overlap_steps = streaming ? std::min(config.overlap, config.period - 1) : 0,
                        .mixing = streaming ? config.mixing : 0.0,
                        .on_peer_failure = on_failure});
    job.run(scheme, local_model);
  } else if (config.scheme == "dpsgd" || config.scheme == "dpsgd-window") {
    avg::dpsgd scheme(comm, model, {.codec = wire, .one_sided = config.scheme == "dpsgd-window"});
    job.run(scheme, local_model);
  } else if (config.scheme == "one-sided-gossip") {
    avg::one_sided_gossip scheme(comm, model, {.codec = wire, .on_peer_failure = on_failure});
    job.run(scheme, local_model);
  } else if (config.scheme == "easgd-sync") {
    avg::easgd scheme(comm, model, {.alpha = config.alpha, .tau = config.tau, .codec = wire});
    job.run(scheme, [&] { return copy_of(scheme.centre()); });
  } else if (config.scheme == "easgd") {
    if (wire)
      throw chorus::error(chorus::errc::invalid_argument,
                          "easgd (asynchronous) sends full-precision models; use --codec none");
    avg::easgd_async scheme(comm, model,
                            {.alpha = config.alpha, .tau = config.tau, .server = 0, .on_peer_failure = on_failure});
    job.run(scheme, [&] { return scheme.centre_snapshot(); });
  } else if (config.scheme == "gosgd") {
    avg::gosgd scheme(comm, model,
                      {.push_probability = config.push_probability, .codec = wire, .on_peer_failure = on_failure});
    job.run(scheme, local_model);
  } else if (config.scheme == "tree-easgd") {
    avg::tree_easgd scheme(
        comm, model, {.alpha = config.alpha, .tau_up = config.tau, .tau_down = config.tau, .fanout = config.fanout});
    job.run(scheme, local_model);
  } else if (const auto mode = consistency_named(config.scheme)) {
    if (wire)
      throw chorus::error(chorus::errc::invalid_argument,
                          "the parameter server sends full-precision gradients; use --codec none");
    avg::parameter_server scheme(
        comm, model, avg::parameters(job.model.gradient_tensors()),
        {.mode = *mode,
         .staleness = config.staleness,
         .push_every = *mode == avg::consistency::downpour ? config.push_every : 1,
         .fetch_every = *mode == avg::consistency::downpour ? config.fetch_every : 1,
         .optimiser = {.learning_rate = config.learning_rate, .momentum = config.momentum, .nesterov = true},
         .on_peer_failure = on_failure,
         .fetch_by_get = config.scheme == "downpour-get",
         .push_by_accumulate = config.scheme == "downpour-accumulate"});
    job.run(scheme, local_model, *mode == avg::consistency::downpour);
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
