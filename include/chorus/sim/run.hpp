// Runs a job of simulated ranks on a SimGrid platform (sim/platform.hpp):
// each rank an actor on its host, with its own communicator over
// simgrid_transport, running the body the caller gives, as run_threads
// does over UCX.
//
//   chorus::sim::engine engine(argc, argv);
//   const auto hosts = chorus::sim::fat_tree(8192, 8, ...);   // the host of each rank
//   chorus::sim::run(hosts, [](chorus::sim::communicator& comm) { chorus::allreduce(comm, data); });
//
// Ranks on one simulated host form a host of the communicator's layout, so
// the registry chooses as it would on such a machine, and the
// shared-memory algorithms run (their flags polled in simulated time). One
// simulation per process: SimGrid keeps one engine.
//
// Each rank runs on a thread of its own (SimGrid's thread contexts): chorus
// keeps per-thread state across a call's waits (collective/scratch.hpp's
// buffers, the flight recorder's current call, the memory router's stream),
// which ranks sharing one thread as coroutines would overwrite. So a
// simulation holds as many ranks as the machine allows threads
// (/proc/sys/kernel/pid_max, vm.max_map_count: about 16,000 on a default
// Linux).
//
// The network model is SimGrid's CM02: latency plus bandwidth shared
// max-min among the transfers on a link, without LV08's TCP factors (a
// latency 13 times the link's, 97% of its bandwidth). Calibrated on this
// machine's namespace hosts with token-bucket links (bench/sim/simulate
// calibrate), CM02 is within 11% of every measured row and LV08 twice as
// slow as measured for 1 MiB; --cfg=network/model:LV08 asks for it.
#pragma once

#include <chorus/comm/communicator.hpp>
#include <chorus/comm/host_layout.hpp>
#include <chorus/comm/options.hpp>
#include <chorus/sim/memory_store.hpp>
#include <chorus/transport/simgrid_transport.hpp>

#include <simgrid/s4u.hpp>

#include <climits>
#include <exception>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace chorus::sim {

using communicator = basic_communicator<simgrid_transport>;

// The host number of each rank (host_layout.hpp's numbering, by host
// name), and the most ranks on one host.
inline std::vector<int> number_hosts(const std::vector<simgrid::s4u::Host*>& host_of, int& most_per_host) {
  std::vector<std::string> names;
  for (const simgrid::s4u::Host* host : host_of) names.push_back(host->get_name());
  std::vector<int> hosts = chorus::number_hosts(names, INT_MAX);
  std::map<int, int> ranks_on;
  most_per_host = 1;
  for (const int host : hosts) most_per_host = std::max(most_per_host, ++ranks_on[host]);
  return hosts;
}

// Runs body(comm) on every rank, rank r on host_of[r], then the engine
// until every rank finished; rethrows the first rank's error. `given`:
// the communicators' options (record defaults to 0 here: a flight record
// per simulated rank would cost memory at scale and say nothing).
// SimGrid's engine as chorus's ranks need it (a thread each, see above):
// made first, then the platform (sim/platform.hpp), then run(). Takes
// SimGrid's own --cfg=... and --log=... arguments besides.
class engine {
 public:
  engine(int argc, char** argv) {
    arguments_.emplace_back(argc > 0 ? argv[0] : "chorus-sim");
    arguments_.emplace_back("--cfg=contexts/factory:thread");
    arguments_.emplace_back("--cfg=network/model:CM02");
    for (int i = 1; i < argc; ++i) arguments_.emplace_back(argv[i]);
    for (std::string& argument : arguments_) pointers_.push_back(argument.data());
    pointers_.push_back(nullptr);
    int count = static_cast<int>(arguments_.size());
    engine_ = std::make_unique<simgrid::s4u::Engine>(&count, pointers_.data());
  }
  simgrid::s4u::Engine& get() const noexcept { return *engine_; }

 private:
  std::vector<std::string> arguments_;
  std::vector<char*> pointers_;
  std::unique_ptr<simgrid::s4u::Engine> engine_;
};

template <class Body>
void run(const std::vector<simgrid::s4u::Host*>& host_of, Body body, options given = {}) {
  const int ranks = static_cast<int>(host_of.size());
  require(ranks >= 1, "sim::run: at least one rank");
  if (!given.record) given.record = 0;
  auto table = std::make_shared<shared_table>();
  std::vector<simgrid::s4u::Mailbox*> inboxes;
  for (int rank = 0; rank < ranks; ++rank)
    inboxes.push_back(simgrid::s4u::Mailbox::by_name("chorus-" + std::to_string(rank)));
  int per_host = 1;
  const std::vector<int> hosts = number_hosts(host_of, per_host);
  auto first_error = std::make_shared<std::exception_ptr>();
  const std::uint64_t job = std::hash<std::string>{}("chorus-sim-" + std::to_string(::getpid()));
  for (int rank = 0; rank < ranks; ++rank)
    simgrid::s4u::Actor::create("rank-" + std::to_string(rank), host_of[static_cast<std::size_t>(rank)], [=] {
      try {
        auto world = std::make_shared<world_state<simgrid_transport>>();
        world->config = resolve(given, per_host);
        world->transport = std::make_shared<simgrid_transport>(rank, inboxes);
        world->store = std::make_unique<memory_store>(table, world->config.timeout, rank);
        world->hosts = hosts;
        world->job = job;
        communicator comm(world);
        body(comm);
      } catch (const std::exception&) {  // not SimGrid's own kill, which is no std::exception
        if (!*first_error) *first_error = std::current_exception();
      }
    });
  simgrid::s4u::Engine::get_instance()->run();
  if (*first_error) std::rethrow_exception(*first_error);
}

}  // namespace chorus::sim
