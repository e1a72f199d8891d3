// Building the world communicator over UCX.
//
//   chorus::communicator world = chorus::init();          // from the environment
//   chorus::communicator world = chorus::connect(info);   // from a launch_info
//
// Steps: resolve settings; host the store if this is rank 0 and no launcher
// does; join the store; create the UCX context and worker; publish this
// worker's address; learn the host table (rank 0 reads every address and
// publishes which ranks share a host; the others read that one value and
// the addresses of their own host's ranks, whose processes they watch);
// finish with a barrier so that every rank is known to be reachable.
// Endpoints are made on a peer's first use (the network transport: transport/network.hpp),
// from the addresses in the store: O(n) store requests in all, not O(n^2),
// and O(1) or O(log n) endpoints per rank for a ring or a tree, not n.
// CHORUS_CONNECT=eager makes every endpoint before the barrier instead.
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
#include <chorus/bootstrap/pmix.hpp>
#include <chorus/bootstrap/store_open.hpp>
#include <chorus/bootstrap/token.hpp>
#include <chorus/comm/options.hpp>
#include <chorus/comm/ucx_communicator.hpp>
#include <chorus/core/log.hpp>

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>

#include <algorithm>
#include <climits>
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
inline constexpr std::string_view hosts_key = "chorus/hosts";        // the host table (host_layout.hpp's text)

inline void join_store(world_state<network::transport>& world, const bootstrap::launch_info& info) {
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
  world.store = std::make_unique<store::serialized>(store::join_store(std::move(joining)));
  if (info.joining) return;         // a joiner's death is its own (admission.hpp)
  world.store->join_as(info.rank);  // a death before the job is complete fails the others' waits at once
}

// This rank's introduction, "<process identity>\n<UCX worker address>",
// kept in the world (a joiner hands it to the ranks that admit it).
inline const std::string& introduce(world_state<network::transport>& world) {
  const auto own = world.transport->address();
  world.introduction = transport::process_identity::self().encode() + "\n";
  world.introduction.append(reinterpret_cast<const char*>(own.data()), own.size());
  return world.introduction;
}

inline void publish_address(world_state<network::transport>& world, int rank) {
  world.store->set(address_key(rank), introduce(world));
}

// A rank's introduction as the transport takes it.
inline network::peer_contact contact_of(const std::string& introduction, int rank, int peer) {
  const auto parts = parse_introduction(introduction);
  if (!parts)
    throw error(errc::mismatch, "the address rank " + std::to_string(peer) + " published does not parse",
                {rank, peer, "connect"});
  return {parts->process, std::string(reinterpret_cast<const char*>(parts->address.data()), parts->address.size())};
}

// Rank 0 reads every rank's introduction and publishes the host table; the
// others wait for the table. Every address is in before the table, so
// before any endpoint is made: a rank that died during start-up is the
// store's peer_failure naming it on every rank, not a failed connect to a
// survivor that gave up on it first.
inline std::vector<int> learn_hosts(world_state<network::transport>& world, const bootstrap::launch_info& info) {
  store::connection& store = *world.store;
  if (info.rank == 0) {
    std::vector<std::string> host_keys(static_cast<std::size_t>(info.size));
    for (int peer = 0; peer < info.size; ++peer)
      host_keys[static_cast<std::size_t>(peer)] =
          contact_of(peer == 0 ? world.introduction : store.wait(address_key(peer)), info.rank, peer).process.host;
    std::vector<int> hosts = number_hosts(host_keys, world.config.ranks_per_host);
    store.set(hosts_key, encode_hosts(hosts));
    return hosts;
  }
  auto hosts = decode_hosts(store.wait(hosts_key), info.size);
  if (!hosts) throw error(errc::mismatch, "the host table rank 0 published does not parse", {info.rank, 0, "connect"});
  return std::move(*hosts);
}

// What both bootstraps do once world.hosts is known: watch the processes
// of this host's ranks, have the transport look each other peer up on its
// first use through `introduction_of(peer)` (a store read, or a PMIx get),
// and with CHORUS_CONNECT=eager reach every rank now. The lookup holds
// `world`: its destructor removes it before the bootstrap goes.
template <class IntroductionOf>
void reach_peers_through(world_state<network::transport>& world, const bootstrap::launch_info& info,
                         IntroductionOf introduction_of) {
  network::transport& transport = *world.transport;
  const std::vector<int>& hosts = *world.hosts;
  const int host = hosts[static_cast<std::size_t>(info.rank)];
  for (int peer = 0; peer < info.size; ++peer)
    if (peer != info.rank && hosts[static_cast<std::size_t>(peer)] == host)
      transport.watch_process(peer, contact_of(introduction_of(peer), info.rank, peer).process);
  transport.look_up_contacts_with([introduction_of, rank = info.rank, size = info.size](int peer) {
    std::optional<network::peer_contact> contact;
    if (peer < size) contact = contact_of(introduction_of(peer), rank, peer);
    return contact;  // a rank above the job's joins later: admitted, not looked up
  });
  if (world.config.eager_connect)
    for (int peer = 0; peer < info.size; ++peer) transport.ensure_endpoint(peer);
}

// Each rank publishes "<process identity>\n<UCX worker address>", so a peer
// on the same host can watch its process (see transport/peer_process.hpp).
// The ranks of this host are watched from the start (a shared-memory
// collective waits on them without the network, so no endpoint would see
// them die); every other peer is watched and connected on first use.
inline void exchange_addresses(world_state<network::transport>& world, const bootstrap::launch_info& info) {
  network::transport& transport = *world.transport;
  if (!world.store) {
    transport.connect(0, transport.address());
    return;
  }
  publish_address(world, info.rank);
  world.hosts = std::make_shared<const std::vector<int>>(learn_hosts(world, info));
  reach_peers_through(world, info, [&world](int peer) { return world.store->wait(address_key(peer)); });
}

// The address other hosts reach this one at: CHORUS_ADDR's host when set,
// else the first IPv4 address that is not loopback, else loopback.
inline std::string reachable_host() {
  if (const auto given = env::get("CHORUS_ADDR")) return bootstrap::parse_address(*given).host;
  std::string found = "127.0.0.1";
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (const ifaddrs* entry = list; entry != nullptr; entry = entry->ifa_next) {
    if (entry->ifa_addr == nullptr || entry->ifa_addr->sa_family != AF_INET) continue;
    const auto* ip = reinterpret_cast<const sockaddr_in*>(entry->ifa_addr);
    if ((ntohl(ip->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    if (inet_ntop(AF_INET, &ip->sin_addr, text, sizeof text) != nullptr) {
      found = text;
      break;
    }
  }
  freeifaddrs(list);
  return found;
}

// Start-up under PMIx: every rank puts its introduction, rank 0 also where
// its store listens (for what needs one later: joined on first use); one
// fence; then the host table from PMIx's node ids and the contacts of
// peers, all read from this node's PMIx server. No store request.
inline void exchange_through_pmix(world_state<network::transport>& world, const bootstrap::launch_info& info) {
  pmix::session& pmix = *world.pmix;
  pmix.put("address", introduce(world));
  if (info.rank == 0 && info.size > 1) {
    store::server_options hosting;
    hosting.bind_host = "0.0.0.0";
    hosting.token = info.token.empty() ? bootstrap::random_token() : info.token;
    hosting.rank = 0;
    const std::string token = hosting.token;
    world.store_host = store::host_store(std::move(hosting));
    pmix.put("store", reachable_host() + ":" + std::to_string(world.store_host->port()) + "\n" + token);
  }
  pmix.fence(world.config.timeout);
  if (info.size > 1) {
    const std::string where = pmix.get(0, "store");
    const std::size_t split = where.find('\n');
    const bootstrap::address at = bootstrap::parse_address(where.substr(0, split), "rank 0's store address (PMIx)");
    store::client_options joining;
    joining.host = info.rank == 0 ? "127.0.0.1" : at.host;
    joining.port = at.port;
    joining.token = split == std::string::npos ? "" : where.substr(split + 1);
    joining.timeout = world.config.timeout;
    joining.rank = info.rank;
    world.store = std::make_unique<store::serialized>(std::make_unique<store::joined_on_first_use>(std::move(joining)));
  }
  std::vector<std::string> node_of(static_cast<std::size_t>(info.size));
  for (int peer = 0; peer < info.size; ++peer)
    node_of[static_cast<std::size_t>(peer)] = std::to_string(pmix.node_of(peer));
  world.hosts = std::make_shared<const std::vector<int>>(number_hosts(node_of, world.config.ranks_per_host));
  reach_peers_through(world, info, [&pmix](int peer) { return pmix.get(peer, "address"); });
}

// Rank, size and placement from the PMIx server, in place of the variables.
inline void place_by_pmix(world_state<network::transport>& world, bootstrap::launch_info& info) {
  world.pmix = pmix::open_session();
  const pmix::placement& at = world.pmix->where();
  if (at.size < 1 || at.size > transport::max_ranks || at.rank < 0 || at.rank >= at.size)
    throw error(errc::mismatch,
                "PMIx placed this process at rank " + std::to_string(at.rank) + " of " + std::to_string(at.size),
                {at.rank, -1, "bootstrap"});
  info.rank = at.rank;
  info.size = at.size;
  info.local_size = std::max(at.local_size, 1);
}

// A joiner: the next free rank, then endpoints to every rank of the job
// (waiting for their addresses: a joiner may start before the job is
// complete) and to every earlier joiner that published one (one that took
// a rank and died before publishing is skipped). A peer that died since
// fails later, as a peer.
inline void join_running_job(world_state<network::transport>& world, bootstrap::launch_info& info) {
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
      std::make_shared<network::transport>(network::config{info.rank, info.rank + 1, world.config.progress, capacity});
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
  // The job's own host table, as its ranks hold it: every rank above the
  // job's (each joiner, this one too) is then a host of its own in every
  // process (communicator::host), so the members of a group that took
  // joiners in work out one layout and choose the same algorithms.
  std::optional<std::vector<int>> hosts;
  if (const std::optional<std::string> table = store.get(hosts_key)) hosts = decode_hosts(*table, info.size);
  world.hosts = std::make_shared<const std::vector<int>>(hosts ? std::move(*hosts)
                                                               : number_hosts(host_keys, world.config.ranks_per_host));
  log::debug(info.rank,
             "joined a running job of " + std::to_string(info.size) + " ranks as rank " + std::to_string(info.rank));
}

}  // namespace detail

inline communicator connect(const bootstrap::launch_info& launch, const options& given = {}) {
  network::prepare_environment();  // before anything reads it
  auto world = std::make_shared<world_state<network::transport>>();
  bootstrap::launch_info info = launch;
  if (info.pmix) detail::place_by_pmix(*world, info);
  try {
    world->config = resolve(given, info.local_size);
  } catch (const error& failure) {
    throw with_rank(failure, info.rank, "init");
  }
  // Under PMIx each rank numbers the hosts itself, so the cut into hosts of
  // `local_size` must not depend on its own node's count: only an explicit
  // size cuts (the store's rank 0 numbers them for everyone).
  if (info.pmix && !given.local_size && !env::get("CHORUS_LOCAL_SIZE")) world->config.ranks_per_host = INT_MAX;
  log::debug(info.rank, "rank " + std::to_string(info.rank) + " of " + std::to_string(info.size) + " (" + info.source +
                            "), progress " + std::string(to_string(world->config.progress)) + " (" +
                            world->config.progress_reason + "), timeout " +
                            std::to_string(world->config.timeout.count()) + " ms");
  world->job = std::hash<std::string>{}(info.pmix ? world->pmix->where().nspace : info.token);
  const int capacity = info.size + world->config.joiners;
  const auto make_transport = [&] {
    world->transport =
        std::make_shared<network::transport>(network::config{info.rank, info.size, world->config.progress, capacity});
  };
  if (info.pmix) {
    make_transport();
    detail::exchange_through_pmix(*world, info);
  } else {
    detail::join_store(*world, info);
    if (info.joining) {
      bootstrap::launch_info joiner = info;
      detail::join_running_job(*world, joiner);
      return communicator(world);
    }
    if (world->store && info.rank == 0) world->store->set(detail::capacity_key, std::to_string(capacity));
    make_transport();
    detail::exchange_addresses(*world, info);
  }
  communicator world_communicator(world);
  world_communicator.barrier();
  return world_communicator;
}

inline communicator init(const options& given = {}) { return connect(bootstrap::discover(), given); }

}  // namespace chorus
