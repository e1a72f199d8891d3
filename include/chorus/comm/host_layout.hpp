// host_layout: how a communicator's ranks sit on hosts, for the collectives
// that use shared memory inside a host and the network between hosts.
#pragma once

#include <algorithm>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chorus {

// Each host's ranks, hosts in order of their first rank.
using host_groups = std::vector<std::vector<int>>;

struct host_layout {
  int hosts = 1;
  int ranks_per_host = 1;   // 0 when hosts hold different numbers of ranks
  int host = 0;             // this rank's host, 0 .. hosts-1 in order of first rank
  int local_rank = 0;       // this rank's place among its host's ranks
  std::vector<int> local;   // the ranks on this rank's host, in rank order
  std::vector<int> across;  // the ranks with this local_rank on each host, in host order (equal hosts only)
  // Each host's ranks: the same on every rank of the communicator, so
  // shared where they are made once (a simulation's world: sim/run.hpp).
  std::shared_ptr<const host_groups> members = std::make_shared<const host_groups>();

  // The ranks with local rank `index` on each host, in host order (equal
  // hosts only).
  std::vector<int> with_local_rank(int index) const {
    std::vector<int> ranks;
    for (const std::vector<int>& group : *members) ranks.push_back(group.at(static_cast<std::size_t>(index)));
    return ranks;
  }

  // The ranks of each host, from host_of[r] (any number per rank).
  static std::shared_ptr<const host_groups> group(const std::vector<int>& host_of) {
    auto groups = std::make_shared<host_groups>();
    std::map<int, int> numbers;  // host id -> 0, 1, ... in order of first rank
    for (std::size_t r = 0; r < host_of.size(); ++r) {
      const auto [at, fresh] = numbers.try_emplace(host_of[r], static_cast<int>(groups->size()));
      if (fresh) groups->emplace_back();
      (*groups)[static_cast<std::size_t>(at->second)].push_back(static_cast<int>(r));
    }
    return groups;
  }

  // `rank`'s view of `groups`; `likely_host`: the group to look in first.
  static host_layout of(std::shared_ptr<const host_groups> groups, int rank, int likely_host = 0) {
    host_layout layout;
    const auto holds = [&](int host) {
      const std::vector<int>& group = (*groups)[static_cast<std::size_t>(host)];
      return std::find(group.begin(), group.end(), rank) != group.end();
    };
    layout.hosts = static_cast<int>(groups->size());
    layout.host = likely_host >= 0 && likely_host < layout.hosts && holds(likely_host) ? likely_host : 0;
    while (!holds(layout.host)) ++layout.host;
    layout.local = (*groups)[static_cast<std::size_t>(layout.host)];
    while (layout.local[static_cast<std::size_t>(layout.local_rank)] != rank) ++layout.local_rank;
    layout.ranks_per_host = static_cast<int>((*groups)[0].size());
    for (const std::vector<int>& group : *groups)
      if (group.size() != (*groups)[0].size()) layout.ranks_per_host = 0;
    layout.members = std::move(groups);
    if (layout.ranks_per_host > 0) layout.across = layout.with_local_rank(layout.local_rank);
    return layout;
  }
  static host_layout of(const std::vector<int>& host_of, int rank) { return of(group(host_of), rank); }
};

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

// The host of every rank as text, in runs of ranks on one host:
// "0*8,1*8,2*8" for three hosts of eight. What rank 0 publishes at start-up
// (comm/connect.hpp): a few bytes per host where the ranks of a host are
// consecutive, as launchers place them, not a value per rank.
inline std::string encode_hosts(const std::vector<int>& host_of) {
  std::string text;
  for (std::size_t first = 0; first < host_of.size();) {
    std::size_t last = first;
    while (last < host_of.size() && host_of[last] == host_of[first]) ++last;
    if (!text.empty()) text += ',';
    text += std::to_string(host_of[first]) + '*' + std::to_string(last - first);
    first = last;
  }
  return text;
}

// The table back, or nothing when the text is not one of `ranks` ranks.
inline std::optional<std::vector<int>> decode_hosts(std::string_view text, int ranks) {
  std::vector<int> host_of;
  const auto number = [](std::string_view digits) -> std::optional<long long> {
    if (digits.empty() || digits.size() > 9) return std::nullopt;
    long long value = 0;
    for (const char c : digits) {
      if (c < '0' || c > '9') return std::nullopt;
      value = value * 10 + (c - '0');
    }
    return value;
  };
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view run = text.substr(0, comma);
    const std::size_t star = run.find('*');
    if (star == std::string_view::npos) return std::nullopt;
    const auto host = number(run.substr(0, star));
    const auto count = number(run.substr(star + 1));
    if (!host || !count || *count < 1 || static_cast<long long>(host_of.size()) + *count > ranks) return std::nullopt;
    host_of.insert(host_of.end(), static_cast<std::size_t>(*count), static_cast<int>(*host));
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    if (comma != std::string_view::npos && text.empty()) return std::nullopt;
  }
  if (static_cast<int>(host_of.size()) != ranks) return std::nullopt;
  return host_of;
}

}  // namespace chorus
