// What decides whether chorus starts and runs at scale: the wire tag's
// fields at their limits, the ring's steps at 65,536 ranks and more, the
// host table rank 0 publishes, endpoints made on first use, and a split
// that reaches O(log n) peers.
#include "support.hpp"

#include <doctest/doctest.h>

#include "expect_error.hpp"

#include <chorus/collective/machinery/ring_geometry.hpp>
#include <chorus/comm/host_layout.hpp>
#include <chorus/comm/member_list.hpp>
#include <chorus/comm/tag.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace tag = chorus::tag;
using chorus::transport::tag_t;

namespace {

// The fields of a wire tag as the transport sends it, read back by hand.
struct fields {
  std::uint64_t sender, id, sequence, step;
};
fields unpack(tag_t wire) {
  const int step_at = 0, sequence_at = tag::step_bits, id_at = tag::step_bits + tag::sequence_bits;
  return {wire >> chorus::transport::user_tag_bits, (wire >> id_at) & tag::max_id,
          (wire >> sequence_at) & (tag::sequence_modulus - 1), (wire >> step_at) & tag::max_step};
}
tag_t on_wire(std::uint64_t sender, tag_t user) { return (sender << chorus::transport::user_tag_bits) | user; }

}  // namespace

TEST_CASE("wire tag: every field holds its largest value without touching its neighbours") {
  // The sizes are the documented limits (docs/scale.md).
  CHECK(chorus::transport::max_ranks == 131072);
  CHECK(tag::max_step + 1 == 524288);
  CHECK(tag::sequence_modulus == 65536);
  CHECK(tag::max_id + 1 == 4096);
  CHECK(chorus::transport::rank_bits + tag::id_bits + tag::sequence_bits + tag::step_bits == 64);

  const std::uint64_t max_sender = chorus::transport::max_ranks - 1;
  const std::uint32_t max_sequence = tag::sequence_modulus - 1;
  for (const std::uint64_t sender : {std::uint64_t{0}, std::uint64_t{1}, max_sender})
    for (const std::uint32_t id : {0u, 1u, tag::max_id})
      for (const std::uint32_t sequence : {0u, 1u, max_sequence})
        for (const std::uint32_t step : {0u, 1u, tag::max_step - 1, tag::max_step}) {
          const fields read = unpack(on_wire(sender, tag::make(id, sequence, step)));
          CHECK(read.sender == sender);
          CHECK(read.id == id);
          CHECK(read.sequence == sequence);
          CHECK(read.step == step);
        }
  // The user part never reaches the sender's bits, whatever it is given.
  CHECK((tag::make(~0u, ~0u, ~0u) & ~chorus::transport::user_tag_mask) == 0);
  CHECK(tag::make(tag::max_id, max_sequence, tag::max_step) == chorus::transport::user_tag_mask);
  // The sequence wraps past its largest value, skipping the point-to-point 0.
  CHECK(tag::next_sequence(max_sequence) == 1);
  CHECK(tag::next_sequence(max_sequence - 1) == max_sequence);
}

TEST_CASE("wire tag: the steps of one call are handed out to the last and no further") {
  tag::step_ranges steps;
  CHECK(steps.fits(std::uint64_t{tag::max_step} + 1));
  CHECK_FALSE(steps.fits(std::uint64_t{tag::max_step} + 2));
  const tag::phase ring = steps.reserve(2 * (65536 - 1) * 4, "ring");  // 65,536 ranks, 4 segments
  const tag::phase rest = steps.reserve(tag::max_step + 1 - ring.count, "rest");
  CHECK(ring(ring.count - 1) + 1 == rest(0));
  CHECK(rest(rest.count - 1) == tag::max_step);
  CHECK_FALSE(steps.fits(1));
  chorus_test::expect_error([&] { (void)rest(rest.count); }, chorus::errc::invalid_argument, "is outside phase 'rest'");
}

TEST_CASE("ring geometry: a ring over 65,536 and 131,072 ranks fits the call's steps") {
  const std::uint64_t steps = std::uint64_t{tag::max_step} + 1;
  struct expected {
    int ranks;
    std::size_t segments;  // per block, at 1 MiB floats per block
  };
  for (const auto [ranks, segments] : {expected{1024, 4}, expected{65536, 4}, expected{131072, 2}}) {
    CAPTURE(ranks);
    const std::size_t hops = 2 * static_cast<std::size_t>(ranks - 1);  // reduce-scatter + allgather
    const std::size_t count = static_cast<std::size_t>(ranks) << 18;   // 1 MiB of floats per block
    const chorus::collective::ring_geometry ring(count, ranks, (256u << 10) / sizeof(float), hops, steps);
    CHECK(ring.steps() <= steps);
    CHECK(ring.segments_per_block() == segments);
    CHECK(ring.step(hops - 1, ring.segments_per_block() - 1) == ring.steps() - 1);
    // One element per rank still takes one step per hop.
    const chorus::collective::ring_geometry tiny(static_cast<std::size_t>(ranks), ranks, 65536, hops, steps);
    CHECK(tiny.steps() == hops);
  }
}

TEST_CASE("host table: runs of ranks per host, back and forth, and bad text refused") {
  const std::vector<std::vector<int>> tables{
      {0},
      {0, 0, 0, 1, 1, 1, 2, 2, 2},
      {0, 1, 0, 1, 2},             // round-robin placement: one run per rank
      std::vector<int>(65536, 0),  // one host
  };
  for (const auto& hosts : tables) {
    const std::string text = chorus::encode_hosts(hosts);
    const auto back = chorus::decode_hosts(text, static_cast<int>(hosts.size()));
    REQUIRE(back);
    CHECK(*back == hosts);
  }
  CHECK(chorus::encode_hosts({0, 0, 0, 1, 1, 1, 2, 2, 2}) == "0*3,1*3,2*3");
  std::vector<int> fat_tree(65536);
  for (std::size_t r = 0; r < fat_tree.size(); ++r) fat_tree[r] = static_cast<int>(r / 8);
  CHECK(chorus::encode_hosts(fat_tree).size() < 16 * 8192);  // a run per host of 8, not a value per rank
  for (const char* bad : {"", "0*3,1*3", "0*3,1*3,2*4", "0*0,1*9", "0*9,", "x*9", "0*-9", "0-9", "0*99999999999"})
    CHECK_FALSE(chorus::decode_hosts(bad, 9));
}

TEST_CASE("member list: the world's identity keeps no table and answers as one would") {
  const chorus::member_list world = chorus::member_list::identity(65536);
  const std::vector<int> table = world.to_vector();
  CHECK(world.is_identity());
  CHECK(world.size() == 65536);
  CHECK(table.size() == 65536);
  for (const std::size_t rank : {std::size_t{0}, std::size_t{1}, std::size_t{40000}, std::size_t{65535}}) {
    CHECK(world[rank] == table[rank]);
    CHECK(world.at(rank) == static_cast<int>(rank));
    CHECK(world.index_of(table[rank]) == static_cast<int>(rank));
  }
  CHECK_THROWS_AS((void)world.at(65536), std::out_of_range);
  CHECK(world.index_of(65536) == -1);
  CHECK(world.index_of(-1) == -1);
  CHECK(std::equal(world.begin(), world.end(), table.begin(), table.end()));

  chorus::member_list grown = chorus::member_list::identity(3);  // with(): a joiner at the end
  grown.push_back(9);
  CHECK_FALSE(grown.is_identity());
  CHECK(grown.to_vector() == std::vector<int>{0, 1, 2, 9});
  CHECK(grown.index_of(9) == 3);
  CHECK(grown.index_of(5) == -1);
  const chorus::member_list group(std::vector<int>{4, 2, 7});
  CHECK(std::vector<int>(group.begin(), group.end()) == std::vector<int>{4, 2, 7});
  CHECK(group.index_of(7) == 2);
  CHECK(chorus::member_list::identity(0).size() == 0);
  CHECK(chorus::member_list::identity(0).begin() == chorus::member_list::identity(0).end());
}

TEST_CASE("host layout: one grouping shared by every rank's view, each view its own") {
  const std::vector<int> host_of{0, 0, 1, 1, 2, 2, 0};  // 7 ranks: host 0 holds 0, 1 and 6
  const std::shared_ptr<const chorus::host_groups> groups = chorus::host_layout::group(host_of);
  REQUIRE(groups->size() == 3);
  CHECK((*groups)[0] == std::vector<int>{0, 1, 6});
  for (int rank = 0; rank < 7; ++rank)
    for (const int guess : {0, 1, 2, 5, -1}) {  // a wrong or impossible first guess only costs a search
      const chorus::host_layout view = chorus::host_layout::of(groups, rank, guess);
      const chorus::host_layout alone = chorus::host_layout::of(host_of, rank);
      CHECK(view.members == groups);  // shared, not copied
      CHECK(view.host == alone.host);
      CHECK(view.local_rank == alone.local_rank);
      CHECK(view.local == alone.local);
      CHECK(view.ranks_per_host == 0);  // unequal hosts
      CHECK(*alone.members == *groups);
    }
  const chorus::host_layout equal = chorus::host_layout::of(std::vector<int>{5, 5, 3, 3}, 3);
  CHECK(equal.host == 1);
  CHECK(equal.local_rank == 1);
  CHECK(equal.across == std::vector<int>{1, 3});
}

TEST_CASE("connections on first use: a 16-rank ring job holds O(1) endpoints per rank, eager holds 16") {
  const int ranks = 16;
  const int barrier_peers = 2 * static_cast<int>(std::ceil(std::log2(ranks)));  // the dissemination barrier's
  for (const bool eager : {false, true}) {
    CAPTURE(eager);
    std::atomic<int> most_after_init{0}, most_added_by_ring{0}, fewest{ranks + 1}, wrong{0};
    chorus::options settings = chorus_test::quick();
    settings.eager_connect = eager;
    settings.check = false;  // the argument check's allgather would reach peers the ring does not
    chorus::run_threads(
        ranks,
        [&](chorus::communicator& comm) {
          const auto after_init = static_cast<int>(comm.transport().endpoints_made());
          // 1001 elements: blocks that do not divide evenly.
          std::vector<double> data(1001);
          for (std::size_t i = 0; i < data.size(); ++i) data[i] = comm.rank() * 1000.0 + static_cast<double>(i);
          chorus::allreduce(comm, std::span(data), chorus::algorithm::ring);
          for (std::size_t i = 0; i < data.size(); ++i)
            if (data[i] != 1000.0 * ranks * (ranks - 1) / 2 + ranks * static_cast<double>(i)) ++wrong;
          const auto after_ring = static_cast<int>(comm.transport().endpoints_made());
          int seen = most_after_init.load();
          while (seen < after_init && !most_after_init.compare_exchange_weak(seen, after_init)) {}
          seen = most_added_by_ring.load();
          while (seen < after_ring - after_init &&
                 !most_added_by_ring.compare_exchange_weak(seen, after_ring - after_init)) {}
          seen = fewest.load();
          while (seen > after_ring && !fewest.compare_exchange_weak(seen, after_ring)) {}
        },
        settings);
    MESSAGE("eager " << eager << ": after init at most " << most_after_init.load() << ", the ring added at most "
                     << most_added_by_ring.load() << ", fewest " << fewest.load());
    CHECK(wrong == 0);
    if (eager) {
      CHECK(fewest == ranks);  // every rank, itself included
      CHECK(most_added_by_ring == 0);
    } else {
      CHECK(most_after_init <= barrier_peers);
      CHECK(most_added_by_ring <= 2);  // the ring's two neighbours, if the barrier had not reached them
    }
  }
}

TEST_CASE("split: groups as a serial sort does, through the dissemination peers only") {
  for (const int ranks : {1, 2, 13, 16}) {
    CAPTURE(ranks);
    const auto color_of = [](int rank) { return (rank * 7) % 5 - 1; };  // -1 opts out
    const auto key_of = [](int rank) { return (rank * 3) % 4; };        // ties: the old rank decides
    struct seen {
      bool valid = false;
      std::uint32_t id = 0;
      int rank = -1;
      std::vector<int> members;  // world ranks, in the group's order
      int endpoints = 0;         // after init's barrier and the split: both reach r +- 2^k
    };
    std::vector<seen> by_rank(static_cast<std::size_t>(ranks));
    chorus::options settings = chorus_test::quick();
    settings.check = false;
    chorus::run_threads(
        ranks,
        [&](chorus::communicator& comm) {
          chorus::communicator group = comm.split(color_of(comm.rank()), key_of(comm.rank()));
          seen& mine = by_rank[static_cast<std::size_t>(comm.rank())];
          mine.endpoints = static_cast<int>(comm.transport().endpoints_made());
          mine.valid = group.valid();
          if (!mine.valid) return;
          mine.id = group.id();
          mine.rank = group.rank();
          for (int r = 0; r < group.size(); ++r) mine.members.push_back(group.world_rank(r));
          group.barrier();  // the group works
        },
        settings);
    std::map<int, std::vector<int>> expected;  // color -> world ranks sorted by (key, rank)
    for (int r = 0; r < ranks; ++r)
      if (color_of(r) >= 0) expected[color_of(r)].push_back(r);
    for (auto& [color, members] : expected)
      std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return key_of(a) < key_of(b); });
    std::map<std::uint32_t, int> color_of_id;
    for (int r = 0; r < ranks; ++r) {
      CAPTURE(r);
      const seen& got = by_rank[static_cast<std::size_t>(r)];
      CHECK(got.endpoints <= 2 * static_cast<int>(std::ceil(std::log2(ranks))));
      CHECK(got.valid == (color_of(r) >= 0));
      if (!got.valid) continue;
      const std::vector<int>& members = expected[color_of(r)];
      CHECK(got.members == members);
      CHECK(got.rank == std::find(members.begin(), members.end(), r) - members.begin());
      CHECK(got.id != 0u);
      const auto [at, fresh] = color_of_id.emplace(got.id, color_of(r));
      CHECK(at->second == color_of(r));  // one id per group, a different one for each
    }
    CHECK(color_of_id.size() == expected.size());
  }
}
