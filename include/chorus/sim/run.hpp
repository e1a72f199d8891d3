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
// Ranks are coroutines on one thread (SimGrid's raw contexts, each with a
// stack of `stack_kib`): chorus keeps per-rank state across a call's waits
// (collective/machinery/scratch.hpp's buffers, the flight recorder's current call,
// the memory router's stream), which run() gives each rank its own of
// (core/rank_local.hpp). A simulated rank costs its stack's touched pages
// and its buffers, not a thread; --cfg=contexts/factory:thread still works.
// Each stack is a mapping and its guard page another, and Linux allows a
// process 65,530 (vm.max_map_count): past about 30,000 ranks pass
// --cfg=contexts/guard-size:0 --cfg=contexts/stack-size:64, so that the
// stacks come from the heap. What every rank reads (the host table, the
// mailboxes, the world's host groups) is made once, and a host's shared
// memory is mapped once (transport/shared_segment.hpp).
//
// The network model is SimGrid's CM02: latency plus bandwidth shared
// max-min among the transfers on a link, without LV08's TCP factors, which
// the shaped links it was calibrated against do not have (docs/scale.md,
// "Calibration"); --cfg=network/model:LV08 asks for it.
#pragma once

#include <chorus/comm/communicator.hpp>
#include <chorus/comm/host_layout.hpp>
#include <chorus/comm/options.hpp>
#include <chorus/core/rank_local.hpp>
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

namespace detail {
// The running rank's own state (run() gives each actor one); null outside
// the ranks (SimGrid's maestro).
inline rank_state* running_rank_state() noexcept {
  simgrid::s4u::Actor* const actor = simgrid::s4u::Actor::self();
  return actor != nullptr ? actor->get_data<rank_state>() : nullptr;
}

// Ranks take their state from running_rank_state() until the scope ends.
class rank_state_scope {
 public:
  rank_state_scope() noexcept : previous_(install_rank_state_source(&running_rank_state)) {}
  ~rank_state_scope() { install_rank_state_source(previous_); }
  rank_state_scope(const rank_state_scope&) = delete;
  rank_state_scope& operator=(const rank_state_scope&) = delete;

 private:
  rank_state_source previous_;
};
}  // namespace detail

// Runs body(comm) on every rank, rank r on host_of[r], then the engine
// until every rank finished; rethrows the first rank's error. `given`:
// the communicators' options (record defaults to 0 here: a flight record
// per simulated rank would cost memory at scale and say nothing).
// SimGrid's engine as chorus's ranks need it (coroutines, see above):
// made first, then the platform (sim/platform.hpp), then run(). Takes
// SimGrid's own --cfg=... and --log=... arguments besides, after its own
// (so they win).
class engine {
 public:
  // A rank's stack: the deepest call chain (a hierarchical allreduce
  // through the memory router, unwinding an error) uses well under it.
  static constexpr int stack_kib = 256;
  // AddressSanitizer and ThreadSanitizer take a switch between coroutine
  // stacks for a stack overflow or a race unless the switch is announced to
  // them, which Debian's SimGrid does not do: sanitized builds run a thread
  // per rank.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  static constexpr const char* context_factory = "thread";
#else
  static constexpr const char* context_factory = "raw";
#endif

  engine(int argc, char** argv) {
    arguments_.emplace_back(argc > 0 ? argv[0] : "chorus-sim");
    arguments_.emplace_back(std::string("--cfg=contexts/factory:") + context_factory);
    arguments_.emplace_back("--cfg=contexts/stack-size:" + std::to_string(stack_kib));
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
  // What every rank reads and none writes is made once: at 65,536 ranks a
  // table of 4 B per rank held by each would take 16 GiB.
  auto inboxes = std::make_shared<std::vector<simgrid::s4u::Mailbox*>>();
  for (int rank = 0; rank < ranks; ++rank)
    inboxes->push_back(simgrid::s4u::Mailbox::by_name("chorus-" + std::to_string(rank)));
  const auto host_table = std::make_shared<const std::vector<simgrid::s4u::Host*>>(host_of);
  int per_host = 1;
  const auto hosts = std::make_shared<const std::vector<int>>(number_hosts(host_of, per_host));
  const std::shared_ptr<const host_groups> grouped_hosts = host_layout::group(*hosts);
  auto first_error = std::make_shared<std::exception_ptr>();
  const std::uint64_t job = std::hash<std::string>{}("chorus-sim-" + std::to_string(::getpid()));
  for (int rank = 0; rank < ranks; ++rank)
    simgrid::s4u::Actor::create("rank-" + std::to_string(rank), host_of[static_cast<std::size_t>(rank)], [=] {
      rank_state state;  // outlives the communicator, whose end may still use it
      simgrid::s4u::Actor::self()->set_data(&state);
      try {
        auto world = std::make_shared<world_state<simgrid_transport>>();
        world->config = resolve(given, per_host);
        world->transport = std::make_shared<simgrid_transport>(rank, inboxes, host_table);
        world->store = std::make_unique<memory_store>(table, world->config.timeout, rank);
        world->hosts = hosts;
        world->grouped_hosts = grouped_hosts;
        world->job = job;
        communicator comm(world);
        body(comm);
      } catch (const std::exception&) {  // not SimGrid's own kill, which is no std::exception
        if (!*first_error) *first_error = std::current_exception();
      }
      simgrid::s4u::Actor::self()->set_data(nullptr);
    });
  const detail::rank_state_scope own_states;
  simgrid::s4u::Engine::get_instance()->run();
  if (*first_error) std::rethrow_exception(*first_error);
}

}  // namespace chorus::sim
