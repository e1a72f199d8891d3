// Simulated platforms for sim::run: each builder makes its hosts and links
// in the running SimGrid engine and returns the host of every rank
// (`per_host` consecutive ranks to a host, as launchers place them).
//
//   star       hosts on one switch, each through its own full-duplex link:
//              the namespace hosts of tests/cross_host with shaped links
//   fat_tree   a two-level fat tree with full bisection (SimGrid's FatTree
//              zone), the usual cluster
//   dragonfly  groups of chassis of routers (SimGrid's Dragonfly zone)
//   edge       a star whose links differ: data centre, campus and home
//              uplinks in turn, a loosely coupled or federated setting
//
// Every host has a loopback for the ranks it holds (the copy through UCX's
// shared memory that chorus's network algorithms pay inside a host).
#pragma once

#include <chorus/core/error.hpp>

#include <simgrid/s4u.hpp>

#include <cmath>
#include <string>
#include <vector>

namespace chorus::sim {

// A link: bytes per second and seconds of latency.
struct link_model {
  double bandwidth = 125e6;
  double latency = 50e-6;
};

// What every builder shares.
struct platform_model {
  link_model nic;                   // a host's link (star, edge), or every link of the tree and the dragonfly
  link_model loopback{10e9, 1e-6};  // between ranks of one host
  double host_speed = 1e9;          // flop/s: local work is not simulated, so it only names the host
};

namespace detail {

inline std::vector<simgrid::s4u::Host*> ranks_on(const std::vector<simgrid::s4u::Host*>& hosts, int per_host) {
  std::vector<simgrid::s4u::Host*> host_of;
  for (simgrid::s4u::Host* host : hosts)
    for (int local = 0; local < per_host; ++local) host_of.push_back(host);
  return host_of;
}

inline simgrid::s4u::Link* loopback_link(simgrid::s4u::NetZone* zone, const std::string& name,
                                         const link_model& model) {
  return zone->create_link(name, model.bandwidth)
      ->set_latency(model.latency)
      ->set_sharing_policy(simgrid::s4u::Link::SharingPolicy::FATPIPE);
}

// Hosts on one switch, host i's link from links[i].
inline std::vector<simgrid::s4u::Host*> star_of(const std::string& name, const std::vector<link_model>& links,
                                                int per_host, const platform_model& model) {
  require(!links.empty() && per_host >= 1, "sim: a platform needs hosts and ranks on them");
  auto* zone = simgrid::s4u::create_star_zone(name);
  std::vector<simgrid::s4u::Host*> hosts;
  for (std::size_t i = 0; i < links.size(); ++i) {
    const std::string id = name + "-" + std::to_string(i);
    auto* host = zone->create_host(id, model.host_speed);
    auto* nic = zone->create_split_duplex_link(id + "-nic", links[i].bandwidth)->set_latency(links[i].latency);
    zone->add_route(host->get_netpoint(), nullptr, nullptr, nullptr, {{nic, simgrid::s4u::LinkInRoute::Direction::UP}},
                    true);
    zone->add_route(host->get_netpoint(), host->get_netpoint(), nullptr, nullptr,
                    {simgrid::s4u::LinkInRoute(loopback_link(zone, id + "-lo", model.loopback))}, false);
    hosts.push_back(host);
  }
  zone->seal();
  return ranks_on(hosts, per_host);
}

// The cluster zones' callbacks: a host at each leaf, with its loopback.
inline simgrid::s4u::ClusterCallbacks leaves(const std::string& name, const platform_model& model,
                                             std::vector<simgrid::s4u::Host*>& hosts) {
  const auto make_host = [&hosts, name, speed = model.host_speed](simgrid::s4u::NetZone* zone,
                                                                  const std::vector<unsigned long>&, unsigned long id) {
    auto* host = zone->create_host(name + "-" + std::to_string(id), speed);
    hosts.push_back(host);
    return std::make_pair(host->get_netpoint(), static_cast<simgrid::kernel::routing::NetPoint*>(nullptr));
  };
  const auto make_loopback = [name, loopback = model.loopback](simgrid::s4u::NetZone* zone,
                                                               const std::vector<unsigned long>&, unsigned long id) {
    return loopback_link(zone, name + "-lo-" + std::to_string(id), loopback);
  };
  return {make_host, make_loopback, {}};
}

}  // namespace detail

inline std::vector<simgrid::s4u::Host*> star(int hosts, int per_host, const platform_model& model) {
  return detail::star_of("star", std::vector<link_model>(static_cast<std::size_t>(hosts), model.nic), per_host, model);
}

// Hosts whose links cycle through `links`.
inline std::vector<simgrid::s4u::Host*> edge(int hosts, int per_host, const std::vector<link_model>& links,
                                             const platform_model& model) {
  std::vector<link_model> each;
  for (int i = 0; i < hosts; ++i) each.push_back(links[static_cast<std::size_t>(i) % links.size()]);
  return detail::star_of("edge", each, per_host, model);
}

// Two levels: leaf switches of `hosts_per_switch` hosts, each with as many
// links up to the spine as down (full bisection); `hosts` is rounded up to
// whole leaf switches.
inline std::vector<simgrid::s4u::Host*> fat_tree(int hosts, int per_host, const platform_model& model,
                                                 unsigned hosts_per_switch = 32) {
  const unsigned leaf_switches =
      static_cast<unsigned>((hosts + static_cast<int>(hosts_per_switch) - 1) / static_cast<int>(hosts_per_switch));
  std::vector<simgrid::s4u::Host*> made;
  const simgrid::s4u::FatTreeParams shape(2, {hosts_per_switch, leaf_switches}, {1, hosts_per_switch}, {1, 1});
  auto* zone = simgrid::s4u::create_fatTree_zone("fat-tree", nullptr, shape, detail::leaves("node", model, made),
                                                 model.nic.bandwidth, model.nic.latency,
                                                 simgrid::s4u::Link::SharingPolicy::SPLITDUPLEX);
  zone->seal();
  made.resize(static_cast<std::size_t>(hosts));
  return detail::ranks_on(made, per_host);
}

// Groups of 4 chassis of 16 routers with 8 hosts each (512 hosts per
// group), as many groups as `hosts` needs.
inline std::vector<simgrid::s4u::Host*> dragonfly(int hosts, int per_host, const platform_model& model) {
  const unsigned per_group = 4 * 16 * 8;
  const unsigned groups =
      std::max(2u, static_cast<unsigned>((hosts + static_cast<int>(per_group) - 1) / static_cast<int>(per_group)));
  std::vector<simgrid::s4u::Host*> made;
  const simgrid::s4u::DragonflyParams shape({groups, 2}, {4, 2}, {16, 1}, 8);
  auto* zone = simgrid::s4u::create_dragonfly_zone("dragonfly", nullptr, shape, detail::leaves("node", model, made),
                                                   model.nic.bandwidth, model.nic.latency,
                                                   simgrid::s4u::Link::SharingPolicy::SPLITDUPLEX);
  zone->seal();
  made.resize(static_cast<std::size_t>(hosts));
  return detail::ranks_on(made, per_host);
}

}  // namespace chorus::sim
