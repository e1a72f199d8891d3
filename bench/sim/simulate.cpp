// The collectives on simulated platforms (include/chorus/sim/), one
// simulation per run:
//
//   simulate calibrate
//       the cross-host jobs measured on this machine (docs/cross_host.csv:
//       2 hosts of 2 ranks and 4 hosts of 1, links shaped to 1 Gbit/s),
//       simulated on a star of the same hosts, each row next to its
//       measurement: CSV on stdout (layout, library, bytes, measured_us,
//       simulated_us, error)
//   simulate scale PLATFORM HOSTS PER_HOST BYTES[,BYTES...] [ALGORITHM,...]
//       every allreduce algorithm (or those named) and the registry's own
//       choice, at each size: CSV on stdout (platform, ranks, per_host,
//       algorithm, bytes, simulated_us: per call, from a start every rank
//       shares to the last rank's return, chosen). PLATFORM: star, fat-tree,
//       dragonfly or edge. Above a few thousand ranks every rank works on
//       one shared buffer (the timing is the network's; the data is not
//       checked: sim_collectives checks it at small counts).
//   simulate diloco SITES PER_SITE BYTES STEP_SECONDS H
//       DiLoCo's rounds (H inner steps of STEP_SECONDS simulated compute,
//       then a sync of BYTES) against allreduce-SGD (a BYTES allreduce
//       every step) on SITES sites of PER_SITE ranks joined by 100 Mbit/s,
//       50 ms links: CSV on stdout (scheme, sites, ranks, bytes, step_s,
//       period, algorithm, seconds_per_step, utilisation)
//
// Links: --bandwidth B/s and --latency s set the hosts' links (default
// 125e6 and the calibrated latency); SimGrid's own --cfg=... pass through.
#include <chorus/chorus.hpp>
#include <chorus/sim/platform.hpp>
#include <chorus/sim/run.hpp>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using chorus::sim::communicator;

// What the measured jobs ran on: veth pairs through a bridge namespace,
// each direction shaped by a token bucket (scripts/hosts.sh); the latency
// is a one-way veth-bridge-veth crossing with its queueing.
constexpr double calibrated_latency = 60e-6;
constexpr double memory_bandwidth = 8e9;  // UCX's shared-memory copy between ranks of a host

std::vector<std::size_t> sizes_from(const std::string& text) {
  std::vector<std::size_t> sizes;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) {
    char* end = nullptr;
    double value = std::strtod(item.c_str(), &end);
    const std::string unit(end);
    if (unit == "K") value *= 1024;
    if (unit == "M") value *= 1024 * 1024;
    if (unit == "G") value *= 1024.0 * 1024 * 1024;
    sizes.push_back(static_cast<std::size_t>(value));
  }
  return sizes;
}

// The job's timing, shared by its ranks (one process): a barrier that
// releases every rank at one simulated instant (chorus's own barrier lets
// them go a few latencies apart, and what a rank is timed from then
// depends on what ran before), and how long each rank took.
struct job_clock {
  simgrid::s4u::BarrierPtr start;
  std::vector<double> seconds;
  explicit job_clock(int ranks)
      : start(simgrid::s4u::Barrier::create(static_cast<unsigned>(ranks))), seconds(static_cast<std::size_t>(ranks)) {}
};

// Simulated seconds per call, over `calls` calls after one to warm up.
// With `clock`: from one instant for every rank to the last rank's return,
// as a call is done only when every rank has its result (the root of a
// tree returns while its broadcast still travels: at 256 ranks and 64 KiB
// it returns after 9 ms a call, the last leaf after 12); without, rank 0's
// own time from chorus's barrier.
template <class Work>
double time_job(communicator& comm, job_clock* clock, Work&& work) {
  comm.barrier();
  if (clock != nullptr) clock->start->wait();
  const double started = simgrid::s4u::Engine::get_clock();
  std::forward<Work>(work)();
  const double finished = simgrid::s4u::Engine::get_clock();
  if (clock == nullptr) return finished - started;
  clock->seconds[static_cast<std::size_t>(comm.rank())] = finished - started;
  comm.barrier();  // every rank's time is in
  const double slowest = *std::max_element(clock->seconds.begin(), clock->seconds.end());
  comm.barrier();  // nobody overwrites them before every rank has read them
  return slowest;
}

double time_allreduce(communicator& comm, std::span<float> data, chorus::algorithm algorithm, int calls,
                      chorus::algorithm* chosen = nullptr, job_clock* clock = nullptr) {
  const chorus::algorithm ran = chorus::allreduce(comm, data, chorus::op::sum{}, algorithm);
  if (chosen != nullptr) *chosen = ran;
  return time_job(comm, clock, [&] {
           for (int call = 0; call < calls; ++call) chorus::allreduce(comm, data, chorus::op::sum{}, algorithm);
         }) /
         calls;
}

struct measured_row {
  std::string layout, library;
  std::size_t bytes;
  double time_us;
};

// docs/cross_host.csv's 1 Gbit/s chorus rows.
std::vector<measured_row> measured(const std::string& path) {
  std::vector<measured_row> rows;
  FILE* file = std::fopen(path.c_str(), "r");
  if (file == nullptr) return rows;
  char line[512];
  while (std::fgets(line, sizeof line, file) != nullptr) {
    std::stringstream fields(line);
    std::string layout, rate, library, bytes, time;
    std::getline(fields, layout, ',');
    std::getline(fields, rate, ',');
    std::getline(fields, library, ',');
    std::getline(fields, bytes, ',');
    std::getline(fields, time, ',');
    if (rate != "1gbit" || library.rfind("chorus", 0) != 0) continue;
    rows.push_back({layout, library, std::stoull(bytes), std::stod(time)});
  }
  std::fclose(file);
  return rows;
}

int calibrate(const chorus::sim::platform_model& model, const std::string& csv) {
  const auto rows = measured(csv);
  if (rows.empty()) {
    std::fprintf(stderr, "simulate: no 1gbit chorus rows in %s\n", csv.c_str());
    return 1;
  }
  // One star holds both layouts: hosts 0-1 for 2x2, hosts 2-5 for 4x1.
  const auto hosts = chorus::sim::star(6, 1, model);
  const std::map<std::string, std::vector<simgrid::s4u::Host*>> layouts{
      {"2x2", {hosts[0], hosts[0], hosts[1], hosts[1]}}, {"4x1", {hosts[2], hosts[3], hosts[4], hosts[5]}}};
  std::map<std::tuple<std::string, std::string, std::size_t>, double> simulated;
  for (const auto& [layout, host_of] : layouts)
    chorus::sim::run(host_of, [&, layout = layout](communicator& comm) {
      for (const measured_row& row : rows) {
        if (row.layout != layout) continue;
        std::vector<float> data(row.bytes / sizeof(float), 1.0f);
        const auto algorithm = row.library == "chorus auto" ? chorus::algorithm::automatic : chorus::algo::ring;
        const double seconds = time_allreduce(comm, std::span(data), algorithm, 3);
        if (comm.rank() == 0) simulated[{row.layout, row.library, row.bytes}] = seconds;
      }
    });
  std::printf("layout,library,bytes,measured_us,simulated_us,error\n");
  double worst = 0, total = 0;
  for (const measured_row& row : rows) {
    const double us = simulated[{row.layout, row.library, row.bytes}] * 1e6;
    const double error = (us - row.time_us) / row.time_us;
    worst = std::max(worst, std::abs(error));
    total += std::abs(error);
    std::printf("%s,%s,%zu,%.1f,%.1f,%+.3f\n", row.layout.c_str(), row.library.c_str(), row.bytes, row.time_us, us,
                error);
  }
  std::fprintf(stderr, "simulate: calibration over %zu rows: mean |error| %.1f%%, worst %.1f%%\n", rows.size(),
               100 * total / static_cast<double>(rows.size()), 100 * worst);
  return 0;
}

std::vector<simgrid::s4u::Host*> platform(const std::string& name, int hosts, int per_host,
                                          const chorus::sim::platform_model& model) {
  if (name == "star") return chorus::sim::star(hosts, per_host, model);
  if (name == "fat-tree") return chorus::sim::fat_tree(hosts, per_host, model);
  if (name == "dragonfly") return chorus::sim::dragonfly(hosts, per_host, model);
  if (name == "edge")
    return chorus::sim::edge(hosts, per_host, {{125e6, 1e-3}, {12.5e6, 10e-3}, {2.5e6, 40e-3}}, model);
  throw chorus::error(chorus::errc::invalid_argument, "no platform '" + name + "' (star, fat-tree, dragonfly, edge)");
}

int scale(const std::string& name, int hosts, int per_host, const std::vector<std::size_t>& sizes,
          const std::vector<chorus::algorithm>& chosen_algorithms, const chorus::sim::platform_model& model) {
  const auto host_of = platform(name, hosts, per_host, model);
  const int ranks = static_cast<int>(host_of.size());
  const bool shared_buffer = ranks > 1024;
  std::size_t largest = 0;
  for (std::size_t bytes : sizes) largest = std::max(largest, bytes);
  auto shared = std::make_shared<std::vector<float>>(shared_buffer ? largest / sizeof(float) : 0);
  std::printf("platform,ranks,per_host,algorithm,bytes,simulated_us,chosen\n");
  chorus::options settings;
  settings.check = false;
  job_clock clock(ranks);
  chorus::sim::run(
      host_of,
      [&](communicator& comm) {
        std::vector<float> own(shared_buffer ? 0 : largest / sizeof(float), 1.0f);
        for (std::size_t bytes : sizes) {
          const std::span<float> data = std::span(shared_buffer ? *shared : own).first(bytes / sizeof(float));
          for (const chorus::algorithm& algorithm : chosen_algorithms) {
            chorus::algorithm ran = algorithm;
            double seconds = -1;
            try {
              seconds = time_allreduce(comm, data, algorithm, 2, &ran, &clock);
            } catch (const chorus::error& failure) {
              if (failure.category() != chorus::errc::invalid_argument) throw;  // not for this layout
            }
            if (comm.rank() == 0 && seconds >= 0)
              std::printf("%s,%d,%d,%s,%zu,%.2f,%s\n", name.c_str(), ranks, per_host,
                          algorithm.is_automatic() ? "auto" : std::string(algorithm.name()).c_str(), bytes,
                          seconds * 1e6, std::string(ran.name()).c_str());
            std::fflush(stdout);
          }
        }
      },
      settings);
  return 0;
}

// DiLoCo's rounds against allreduce-SGD on sites of `per_site` ranks
// joined by the hosts' links, each inner step `step_seconds` of simulated
// compute: allreduce-SGD allreduces `bytes` of gradients after every step
// (timed over 3), DiLoCo takes `period` steps and then makes the
// collectives averaging/diloco.hpp makes at a sync: its 4-double report
// and the model's allreduce (one round timed). Every rank works on one
// shared buffer (the timing is the network's; test_diloco_threads checks
// the arithmetic). Utilisation: compute over wall time.
int diloco_rounds(int sites, int per_site, std::size_t bytes, double step_seconds, std::uint64_t period,
                  const chorus::sim::platform_model& model) {
  const auto host_of = chorus::sim::star(sites, per_site, model);
  const int ranks = static_cast<int>(host_of.size());
  auto shared = std::make_shared<std::vector<float>>(bytes / sizeof(float));
  chorus::options settings;
  settings.check = false;
  job_clock clock(ranks);
  chorus::sim::run(
      host_of,
      [&](communicator& comm) {
        const std::span<float> data(*shared);
        const auto compute = [&] { simgrid::s4u::this_actor::sleep_for(step_seconds); };
        const chorus::algorithm chosen = chorus::allreduce(comm, data, chorus::op::avg{});  // connections made
        constexpr int sgd_steps = 3;
        const double sgd = time_job(comm, &clock, [&] {
                             for (int step = 0; step < sgd_steps; ++step) {
                               compute();
                               chorus::allreduce(comm, data, chorus::op::avg{});
                             }
                           }) /
                           sgd_steps;
        std::array<double, 4> report{};
        const double diloco = time_job(comm, &clock, [&] {
                                for (std::uint64_t step = 0; step < period; ++step) compute();
                                chorus::allreduce(comm, std::span<double>(report), chorus::op::sum{});
                                chorus::allreduce(comm, data, chorus::op::avg{});
                              }) /
                              static_cast<double>(period);
        if (comm.rank() != 0) return;
        for (const auto& [scheme, seconds] : {std::pair{"allreduce-sgd", sgd}, std::pair{"diloco", diloco}})
          std::printf("%s,%d,%d,%zu,%g,%llu,%s,%.6f,%.4f\n", scheme, sites, ranks, bytes, step_seconds,
                      static_cast<unsigned long long>(std::string_view(scheme) == "diloco" ? period : 1),
                      std::string(chosen.name()).c_str(), seconds, step_seconds / seconds);
        std::fflush(stdout);
      },
      settings);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  chorus::sim::engine engine(argc, argv);
  std::vector<std::string> args;
  chorus::sim::platform_model model;
  model.nic = {125e6, calibrated_latency};
  model.loopback = {memory_bandwidth, 1e-6};
  bool link_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--bandwidth" && i + 1 < argc) {
      model.nic.bandwidth = std::stod(argv[++i]);
      link_given = true;
    } else if (arg == "--latency" && i + 1 < argc) {
      model.nic.latency = std::stod(argv[++i]);
      link_given = true;
    } else if (arg.rfind("--", 0) != 0) {
      args.push_back(arg);
    }
  }
  try {
    if (!args.empty() && args[0] == "calibrate")
      return calibrate(model, args.size() > 1 ? args[1] : std::string(CHORUS_SOURCE_DIR "/docs/cross_host.csv"));
    if (args.size() >= 6 && args[0] == "diloco") {
      if (!link_given) model.nic = {100e6 / 8, 50e-3};  // sites joined by 100 Mbit/s, 50 ms links
      std::printf("scheme,sites,ranks,bytes,step_s,period,algorithm,seconds_per_step,utilisation\n");
      return diloco_rounds(std::stoi(args[1]), std::stoi(args[2]), sizes_from(args[3]).at(0), std::stod(args[4]),
                           std::stoull(args[5]), model);
    }
    if (args.size() >= 5 && args[0] == "scale") {
      std::vector<chorus::algorithm> algorithms{chorus::algorithm::automatic};
      if (args.size() > 5) {
        std::stringstream list(args[5]);
        for (std::string name; std::getline(list, name, ',');)
          algorithms.push_back(chorus::parse_algorithm(name, "simulate"));
      } else {
        for (const auto& row : chorus::entry_of<chorus::collective::allreduce_algorithms>().algorithms)
          algorithms.push_back(row.id);
      }
      return scale(args[1], std::stoi(args[2]), std::stoi(args[3]), sizes_from(args[4]), algorithms, model);
    }
  } catch (const chorus::error& failure) {
    std::fprintf(stderr, "simulate: %s\n", failure.what());
    return 1;
  }
  std::fprintf(stderr,
               "usage: simulate calibrate [CSV] | simulate scale PLATFORM HOSTS PER_HOST BYTES[,...] [ALGORITHMS] |\n"
               "       simulate diloco SITES PER_SITE BYTES STEP_SECONDS H\n");
  return 2;
}
