// A window's graph, agreed at creation: every rank's sources (the ranks
// that write into its slots), allgathered in one record per rank, so each
// rank knows its targets and where its slot sits in each (a target's slots
// are its sources in ascending order), and every rank raises the same
// error, naming the same rank, when the ranks disagree on the sources, the
// tensor's size or the slot's size. The record also says whether the rank
// can keep its slots in device memory: the window takes device slots only
// where every rank can. Cost: one allgather of n (18 + n) bytes.
#pragma once

#include <chorus/collective/allgather/allgather.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace chorus::windows {

struct graph {
  struct target {
    int rank = -1;
    std::size_t position = 0;  // this rank among the target's sources, in ascending order
  };
  std::vector<int> sources;  // ascending
  std::vector<target> targets;
  int refusing_device = -1;  // the first rank that cannot keep device slots; -1: every rank can
};

// Collective over `comm`. `given`: this rank's sources, or every other rank.
template <class Communicator>
graph agree_on_graph(Communicator& comm, const std::optional<std::vector<int>>& given, std::uint64_t elements,
                     std::uint64_t slot_payload_bytes, bool device_direct) {
  const int n = comm.size(), me = comm.rank();
  const auto fail = [&](errc code, const std::string& what, int rank) {
    return error(code, what, {comm.world_rank(me), comm.world_rank(rank), "window"});
  };
  std::vector<int> mine;
  bool valid = true;
  if (given) {
    mine = *given;
    std::sort(mine.begin(), mine.end());
    for (std::size_t k = 0; k < mine.size(); ++k)
      valid &= mine[k] >= 0 && mine[k] < n && mine[k] != me && (k == 0 || mine[k] != mine[k - 1]);
  } else {
    for (int r = 0; r < n; ++r)
      if (r != me) mine.push_back(r);
  }
  // One record per rank: elements, slot payload bytes, whether its sources
  // are valid, whether it takes device slots, then a source flag per rank.
  const std::size_t record = 18 + static_cast<std::size_t>(n);
  std::vector<std::uint8_t> all(record * static_cast<std::size_t>(n));
  std::uint8_t* own = all.data() + record * static_cast<std::size_t>(me);
  const std::uint64_t sizes[2] = {elements, slot_payload_bytes};
  std::memcpy(own, sizes, sizeof sizes);
  own[16] = valid ? 1 : 0;
  own[17] = device_direct ? 1 : 0;
  if (valid)
    for (int source : mine) own[18 + source] = 1;
  allgather(comm, std::span<std::uint8_t>(all));
  const auto at = [&](int of) { return all.data() + record * static_cast<std::size_t>(of); };
  const auto is_source = [&](int of, int rank) { return at(of)[18 + static_cast<std::size_t>(rank)] != 0; };
  for (int r = 0; r < n; ++r)
    if (at(r)[16] == 0)
      throw fail(errc::invalid_argument,
                 "rank " + std::to_string(r) +
                     " gave sources that are not distinct ranks of the communicator other than itself",
                 r);
  std::uint64_t first[2];  // rank 0's
  std::memcpy(first, at(0), sizeof first);
  for (int r = 1; r < n; ++r) {
    std::uint64_t theirs[2];
    std::memcpy(theirs, at(r), sizeof theirs);
    if (theirs[0] != first[0] || theirs[1] != first[1])
      throw fail(errc::mismatch,
                 "rank " + std::to_string(r) + " made its window of " + std::to_string(theirs[0]) + " elements (" +
                     std::to_string(theirs[1]) + " bytes a slot), rank 0 of " + std::to_string(first[0]) + " (" +
                     std::to_string(first[1]) + ")",
                 r);
  }
  graph agreed;
  agreed.sources = std::move(mine);
  for (int r = 0; r < n && agreed.refusing_device < 0; ++r)
    if (at(r)[17] == 0) agreed.refusing_device = r;
  for (int target = 0; target < n; ++target) {
    if (target == me || !is_source(target, me)) continue;
    std::size_t position = 0;
    for (int r = 0; r < me; ++r) position += is_source(target, r) ? 1 : 0;
    agreed.targets.push_back({target, position});
  }
  return agreed;
}

}  // namespace chorus::windows
