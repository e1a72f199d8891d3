// Building the world communicator over UCX.
//
//   chorus::communicator world = chorus::init();          // from the environment
//   chorus::communicator world = chorus::connect(info);   // from a launch_info
//
// Steps: resolve settings; host the store if this is rank 0 and no launcher
// does; join the store; create the UCX context and worker; publish this
// worker's address; fetch every peer's address and create endpoints; finish
// with a barrier so that every rank is known to be reachable.
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

inline std::string address_key(int rank) { return "chorus/address/" + std::to_string(rank); }

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
  std::string published = transport::process_identity::self().encode() + "\n";
  published.append(reinterpret_cast<const char*>(own.data()), own.size());
  world.store->set(address_key(info.rank), published);
  std::vector<std::string> values(static_cast<std::size_t>(info.size));
  for (int peer = 0; peer < info.size; ++peer)
    values[static_cast<std::size_t>(peer)] = peer == info.rank ? published : world.store->wait(address_key(peer));
  for (int peer = 0; peer < info.size; ++peer) {
    const std::string& value = values[static_cast<std::size_t>(peer)];
    const std::size_t split = value.find('\n');
    const auto process = transport::process_identity::decode(std::string_view(value).substr(0, split));
    if (split == std::string::npos || !process)
      throw error(errc::mismatch, "the address rank " + std::to_string(peer) + " published does not parse",
                  {info.rank, peer, "connect"});
    host_keys[static_cast<std::size_t>(peer)] = process->host;
    transport.watch_process(peer, *process);  // first: failing to reach a dead peer is its failure
    transport.connect(peer, std::as_bytes(std::span(value).subspan(split + 1)));
  }
  world.hosts = number_hosts(host_keys, world.config.ranks_per_host);
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
  world->transport = std::make_shared<ucx::ucx_transport>(ucx::config{info.rank, info.size, world->config.progress});
  detail::exchange_addresses(*world, info);
  communicator world_communicator(world);
  world_communicator.barrier();
  return world_communicator;
}

inline communicator init(const options& given = {}) { return connect(bootstrap::discover(), given); }

}  // namespace chorus
