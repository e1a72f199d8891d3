// Building the world communicator over UCX.
//
//   chorus::communicator world = chorus::init();          // from the environment
//   chorus::communicator world = chorus::connect(info);   // from a launch_info
//
// Steps: resolve settings; host the store if this is rank 0 and no launcher
// does; join the store; create the UCX context and worker; publish this
// worker's address; fetch every peer's address and create endpoints; finish
// with a barrier so that every rank is known to be reachable.
//
// A process started with CHORUS_JOIN=1 joins a running job instead: it
// takes the next rank above the job's (an atomic add in the store, up to
// the CHORUS_JOINERS slots rank 0 published), publishes its address,
// connects to every rank whose address is in the store, and returns at
// once (no barrier: the job does not stop for it). Its ranks reach it only
// once a scheme admits it (averaging/admission.hpp), and its store
// connection is not the job's: its death never fails the others' waits.
#pragma once

#include <chorus/bootstrap/environment.hpp>
#include <chorus/bootstrap/store_open.hpp>
#include <chorus/comm/options.hpp>
#include <chorus/comm/ucx_communicator.hpp>
#include <chorus/core/log.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace chorus {

namespace detail {

inline constexpr std::string_view capacity_key = "chorus/capacity";  // ranks the job can reach: size + joiners
inline constexpr std::string_view joiners_key = "chorus/joiners";    // processes that took a rank by joining

inline void join_store(world_state<ucx::ucx_transport>& world, const bootstrap::launch_info& info) {
  if (info.size == 1 && !info.store) return;
  if (!info.store && !(info.rendezvous && info.rank != 0))
    throw error(errc::invalid_argument, "no store address for a job of " + std::to_string(info.size) + " ranks",
                {info.rank, -1, "init"});
  bootstrap::address where = info.store.value_or(bootstrap::address{});
  if (info.rank == 0 && !info.launcher_hosts_store) {
    store::server_options hosting;
    hosting.bind_host = where.host;
    hosting.port = where.port;
    hosting.token = info.token;
    hosting.rank = info.rank;
    world.store_host = store::host_store(std::move(hosting));
    where.port = world.store_host->port();  // the port chosen, when asked for any
    log::debug(info.rank, "hosting the store at " + world.store_host->address());
    if (info.rendezvous) info.rendezvous->publish(where);
  } else if (info.rendezvous) {
    where = info.rendezvous->look_up();
  }
  store::client_options joining;
  joining.host = where.host == "0.0.0.0" || where.host == "::" ? "127.0.0.1" : where.host;
  joining.port = where.port;
  joining.token = info.token;
  joining.timeout = world.config.timeout;
  joining.rank = info.rank;
  world.store = store::join_store(std::move(joining));
  if (info.joining) return;         // a joiner's death is its own (admission.hpp)
  world.store->join_as(info.rank);  // a death before the job is complete fails the others' waits at once
}

// The host of each rank: ranks that share a kernel and its network and pid
// namespaces (transport/peer_process.hpp), each such group cut into runs of
// `per_host` ranks in rank order (CHORUS_LOCAL_SIZE: several simulated
// hosts on one machine, or a launcher's word that fewer ranks share one).
// Hosts are numbered in order of their first rank.
inline std::vector<int> number_hosts(const std::vector<std::string>& keys, int per_host) {
  std::vector<int> hosts(keys.size());
  std::map<std::string, int> seen;  // key -> ranks of it so far
  std::map<std::pair<std::string, int>, int> numbers;
  for (std::size_t rank = 0; rank < keys.size(); ++rank) {
    const int run = seen[keys[rank]]++ / std::max(per_host, 1);
    hosts[rank] = numbers.try_emplace({keys[rank], run}, static_cast<int>(numbers.size())).first->second;
  }
  return hosts;
}

inline const std::string& publish_address(world_state<ucx::ucx_transport>& world, int rank) {
  const auto own = world.transport->address();
  world.introduction = transport::process_identity::self().encode() + "\n";
  world.introduction.append(reinterpret_cast<const char*>(own.data()), own.size());
  world.store->set(address_key(rank), world.introduction);
  return world.introduction;
}

// Each rank publishes "<process identity>\n<UCX worker address>", so a peer
// on the same host can watch its process (see transport/peer_process.hpp).
// Every address is in before the first endpoint is made: a rank that died
// during start-up is then the store's peer_failure naming it on every
// rank, not a failed connect to a survivor that gave up on it first.
inline void exchange_addresses(world_state<ucx::ucx_transport>& world, const bootstrap::launch_info& info) {
  ucx::ucx_transport& transport = *world.transport;
  const auto own = transport.address();
  if (!world.store) {
    transport.connect(0, own);
    return;
  }
  std::vector<std::string> host_keys(static_cast<std::size_t>(info.size));
  const std::string& published = publish_address(world, info.rank);
  std::vector<std::string> values(static_cast<std::size_t>(info.size));
  for (int peer = 0; peer < info.size; ++peer)
    values[static_cast<std::size_t>(peer)] = peer == info.rank ? published : world.store->wait(address_key(peer));
  for (int peer = 0; peer < info.size; ++peer) {
    const auto parts = parse_introduction(values[static_cast<std::size_t>(peer)]);
    if (!parts)
      throw error(errc::mismatch, "the address rank " + std::to_string(peer) + " published does not parse",
                  {info.rank, peer, "connect"});
    host_keys[static_cast<std::size_t>(peer)] = parts->process.host;
    transport.watch_process(peer, parts->process);  // first: failing to reach a dead peer is its failure
    transport.connect(peer, parts->address);
  }
  world.hosts = number_hosts(host_keys, world.config.ranks_per_host);
}

// A joiner: the next free rank, then endpoints to every rank of the job
// (waiting for their addresses: a joiner may start before the job is
// complete) and to every earlier joiner that published one (one that took
// a rank and died before publishing is skipped). A peer that died since
// fails later, as a peer.
inline void join_running_job(world_state<ucx::ucx_transport>& world, bootstrap::launch_info& info) {
  store::connection& store = *world.store;
  const auto capacity = static_cast<int>(std::stoll(store.wait(capacity_key)));
  const auto number = store.add(joiners_key, 1);
  info.rank = info.size - 1 + static_cast<int>(number);
  if (info.rank >= capacity)
    throw error(errc::invalid_argument,
                "the job takes " + std::to_string(capacity - info.size) +
                    " joiners (CHORUS_JOINERS where it started); this is joiner " + std::to_string(number),
                {info.rank, -1, "join"});
  world.transport =
      std::make_shared<ucx::ucx_transport>(ucx::config{info.rank, info.rank + 1, world.config.progress, capacity});
  world.joined = true;
  publish_address(world, info.rank);
  std::vector<std::string> host_keys(static_cast<std::size_t>(info.rank + 1));
  host_keys.back() = transport::process_identity::self().host;
  for (int peer = 0; peer < info.rank; ++peer) {
    const std::optional<std::string> value =
        peer < info.size ? std::optional(store.wait(address_key(peer))) : store.get(address_key(peer));
    const auto parts = value ? parse_introduction(*value) : std::nullopt;
    if (!parts) continue;
    host_keys[static_cast<std::size_t>(peer)] = parts->process.host;
    world.transport->watch_process(peer, parts->process);
    try {
      world.transport->connect(peer, parts->address);
    } catch (const error& failure) {
      if (failure.category() != errc::peer_failure) throw;  // a peer gone since: its failure when addressed
    }
  }
  world.hosts = number_hosts(host_keys, world.config.ranks_per_host);
  log::debug(info.rank,
             "joined a running job of " + std::to_string(info.size) + " ranks as rank " + std::to_string(info.rank));
}

}  // namespace detail

inline communicator connect(const bootstrap::launch_info& info, const options& given = {}) {
  ucx::prepare_environment();  // before anything reads it
  auto world = std::make_shared<world_state<ucx::ucx_transport>>();
  try {
    world->config = resolve(given, info.local_size);
  } catch (const error& failure) {
    throw with_rank(failure, info.rank, "init");
  }
  log::debug(info.rank, "rank " + std::to_string(info.rank) + " of " + std::to_string(info.size) + " (" + info.source +
                            "), progress " + std::string(to_string(world->config.progress)) + " (" +
                            world->config.progress_reason + "), timeout " +
                            std::to_string(world->config.timeout.count()) + " ms");
  world->job = std::hash<std::string>{}(info.token);
  detail::join_store(*world, info);
  if (info.joining) {
    bootstrap::launch_info joiner = info;
    detail::join_running_job(*world, joiner);
    return communicator(world);
  }
  const int capacity = info.size + world->config.joiners;
  if (world->store && info.rank == 0) world->store->set(detail::capacity_key, std::to_string(capacity));
  world->transport =
      std::make_shared<ucx::ucx_transport>(ucx::config{info.rank, info.size, world->config.progress, capacity});
  detail::exchange_addresses(*world, info);
  communicator world_communicator(world);
  world_communicator.barrier();
  return world_communicator;
}

inline communicator init(const options& given = {}) { return connect(bootstrap::discover(), given); }

}  // namespace chorus
