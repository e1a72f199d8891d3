// chorus-perf calibrate: measures the machine the cost model prices the
// algorithms on (core/machine.hpp) and writes its file, for CHORUS_MACHINE.
//
//   chorus-run -n N chorus-perf calibrate [--out FILE] [--rounds R] [--max BYTES]
//
// Each path is a ping-pong per size from 8 bytes to --max (factor 4), one
// way being half the round trip, the median of R rounds (default 20),
// fitted by least squares to alpha + bytes * beta: within a host between
// rank 0 and the next rank on its host, between hosts between rank 0 and
// the first rank on another host. A path the job does not have keeps its
// default, and the file says so. Rank 0 times a float sum into an
// accumulator (gamma: per byte of the accumulator) and memcpy (memory_beta:
// per byte copied) on buffers of 64 MiB, past the caches; the ranks of rank
// 0's host time the one-slot shared-memory allreduce of one float (flag).
// Rank 0 prints the file, and writes it with --out.
#include "calibrate.hpp"

#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/collective/machinery/reduce_local.hpp>
#include <chorus/core/machine.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace perf {
namespace {

using clock_type = std::chrono::steady_clock;

struct calibrate_options {
  std::string out;
  int rounds = 20;
  std::size_t max_bytes = std::size_t{4} << 20;
};

calibrate_options parse_calibrate(int argc, char** argv) {
  calibrate_options given;
  for (int i = 2; i < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(std::string(flag) + " needs a value");
    const std::string value = argv[i + 1];
    if (flag == "--out")
      given.out = value;
    else if (flag == "--rounds")
      given.rounds = std::max(1, std::stoi(value));
    else if (flag == "--max")
      given.max_bytes = std::max<std::size_t>(64, std::stoull(value));
    else
      throw std::invalid_argument("unknown option " + std::string(flag) + " (--out, --rounds, --max)");
  }
  return given;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// The path between rank 0 and `peer` (every rank takes part: the others
// only wait), fitted; on rank 0 alone the result means anything.
chorus::path_cost ping_pong(chorus::communicator& comm, int peer, const calibrate_options& given) {
  std::vector<double> sizes, one_way;
  std::vector<std::uint8_t> buffer(given.max_bytes);
  for (std::size_t bytes = 8; bytes <= given.max_bytes; bytes *= 4) {
    const std::span<std::uint8_t> message(buffer.data(), bytes);
    std::vector<double> rounds;
    for (int round = -2; round < given.rounds; ++round) {  // two to warm up
      const auto start = clock_type::now();
      if (comm.rank() == 0) {
        comm.send(message, peer);
        comm.recv(message, peer);
      } else if (comm.rank() == peer) {
        comm.recv(message, 0);
        comm.send(message, 0);
      }
      if (round >= 0) rounds.push_back(seconds_since(start) / 2);
    }
    sizes.push_back(double(bytes));
    one_way.push_back(median(rounds));
  }
  comm.barrier();
  return chorus::fit_path(sizes, one_way);
}

// Seconds per byte of `work` over `bytes`, the median of a few runs.
template <class Work>
double per_byte(std::size_t bytes, Work&& work) {
  std::vector<double> runs;
  for (int run = -1; run < 5; ++run) {
    const auto start = clock_type::now();
    work();
    if (run >= 0) runs.push_back(seconds_since(start));
  }
  return median(runs) / double(bytes);
}

// The one-slot shared-memory allreduce of one float among rank 0's host's
// ranks: one flag round trip and next to nothing else.
double flag_round_trip(chorus::communicator& comm, const calibrate_options& given) {
  chorus::communicator host = comm.split(comm.layout().host == 0 ? 0 : 1, comm.rank());
  double seconds = 0;
  if (comm.layout().host == 0 && host.size() > 1) {
    float value = 1.0f;
    std::vector<double> rounds;
    for (int round = -10; round < 10 * given.rounds; ++round) {
      const auto start = clock_type::now();
      chorus::allreduce(host, std::span(&value, 1), chorus::op::sum{}, chorus::algorithm::shared_memory_small);
      if (round >= 0) rounds.push_back(seconds_since(start));
    }
    seconds = median(rounds);
  }
  comm.barrier();
  return seconds;
}

// The first rank after 0 on rank 0's host, and the first on another host (-1: none).
std::pair<int, int> partners(const chorus::communicator& comm) {
  const chorus::host_groups& groups = *comm.layout().members;
  const int same = groups[0].size() > 1 ? groups[0][1] : -1;
  const int other = groups.size() > 1 ? groups[1][0] : -1;
  return {same, other};
}

}  // namespace

int calibrate(chorus::communicator& comm, int argc, char** argv) {
  const calibrate_options given = parse_calibrate(argc, argv);
  if (comm.size() < 2) throw std::invalid_argument("calibrate needs two ranks at least (chorus-run -n 2)");
  chorus::machine_model measured;
  std::string notes;
  const auto [same, other] = partners(comm);
  if (same >= 0)
    measured.within_host = ping_pong(comm, same, given);
  else
    notes += "# within_host: rank 0 is alone on its host; the default is kept\n";
  if (other >= 0)
    measured.between_hosts = ping_pong(comm, other, given);
  else
    notes += "# between_hosts: the job is on one host; the default is kept\n";
  if (comm.rank() == 0) {
    const std::size_t count = (std::size_t{64} << 20) / sizeof(float);
    std::vector<float> sum(count, 1.0f), incoming(count, 2.0f);
    measured.gamma = per_byte(count * sizeof(float), [&] {
      chorus::collective::reduce_into(std::span(sum), std::span<const float>(incoming), chorus::op::sum{}, false);
    });
    measured.memory_beta =
        per_byte(count * sizeof(float), [&] { std::memcpy(sum.data(), incoming.data(), count * sizeof(float)); });
  }
  const double flag = flag_round_trip(comm, given);
  if (flag > 0)
    measured.flag = flag;
  else
    notes += "# flag: rank 0 is alone on its host; the default is kept\n";
  if (comm.rank() != 0) return 0;
  const int hosts = comm.layout().hosts;
  const std::string text = std::string("# chorus-perf calibrate: ") + std::to_string(comm.size()) + " ranks on " +
                           std::to_string(hosts) + (hosts == 1 ? " host\n" : " hosts\n") + notes + measured.text();
  std::fputs(text.c_str(), stdout);
  if (!given.out.empty()) {
    std::ofstream file(given.out);
    file << text;
    if (!file) throw std::runtime_error("cannot write " + given.out);
  }
  return 0;
}

}  // namespace perf
