// host_layout: how a communicator's ranks sit on hosts, for the collectives
// that use shared memory inside a host and the network between hosts.
#pragma once

#include <cstddef>
#include <map>
#include <vector>

namespace chorus {

struct host_layout {
  int hosts = 1;
  int ranks_per_host = 1;   // 0 when hosts hold different numbers of ranks
  int host = 0;             // this rank's host, 0 .. hosts-1 in order of first rank
  int local_rank = 0;       // this rank's place among its host's ranks
  std::vector<int> local;   // the ranks on this rank's host, in rank order
  std::vector<int> across;  // the ranks with this local_rank on each host, in host order (equal hosts only)
  std::vector<std::vector<int>> members;  // each host's ranks, hosts in order

  // The ranks with local rank `index` on each host, in host order (equal
  // hosts only).
  std::vector<int> with_local_rank(int index) const {
    std::vector<int> ranks;
    for (const std::vector<int>& group : members) ranks.push_back(group.at(static_cast<std::size_t>(index)));
    return ranks;
  }

  // From host_of[r], any number per rank (what the communicator knows).
  static host_layout of(const std::vector<int>& host_of, int rank) {
    host_layout layout;
    std::map<int, int> numbers;  // host id -> 0, 1, ... in order of first rank
    std::vector<std::vector<int>>& groups = layout.members;
    for (std::size_t r = 0; r < host_of.size(); ++r) {
      const auto [at, fresh] = numbers.try_emplace(host_of[r], static_cast<int>(groups.size()));
      if (fresh) groups.emplace_back();
      groups[static_cast<std::size_t>(at->second)].push_back(static_cast<int>(r));
    }
    layout.hosts = static_cast<int>(groups.size());
    layout.host = numbers.at(host_of[static_cast<std::size_t>(rank)]);
    layout.local = groups[static_cast<std::size_t>(layout.host)];
    while (layout.local[static_cast<std::size_t>(layout.local_rank)] != rank) ++layout.local_rank;
    layout.ranks_per_host = static_cast<int>(groups[0].size());
    for (const std::vector<int>& group : groups)
      if (group.size() != groups[0].size()) layout.ranks_per_host = 0;
    if (layout.ranks_per_host > 0) layout.across = layout.with_local_rank(layout.local_rank);
    return layout;
  }
};

}  // namespace chorus
