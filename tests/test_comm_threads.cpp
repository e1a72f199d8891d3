// The communicator over real UCX, ranks as threads (run_threads).
#include "support.hpp"

#include <doctest/doctest.h>

#include "expect_error.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using chorus::communicator;
using chorus_test::quick;
using steady = std::chrono::steady_clock;

TEST_CASE("point-to-point between every pair, 1..9 ranks, odd and empty sizes") {
  for (int ranks = 1; ranks <= 9; ++ranks) {
    CAPTURE(ranks);
    std::atomic<std::size_t> wrong{0};
    chorus::run_threads(
        ranks,
        [&](communicator& comm) {
          REQUIRE(comm.size() == ranks);
          wrong += chorus_test::all_pairs_exchange(comm);
        },
        quick(30000ms));
    CHECK(wrong == 0);
  }
}

TEST_CASE("barrier: nobody leaves before everybody arrived") {
  for (int ranks : {1, 2, 3, 5, 8}) {
    CAPTURE(ranks);
    std::vector<std::atomic<int>> arrived(10);
    std::atomic<int> early{0};
    chorus::run_threads(
        ranks,
        [&](communicator& comm) {
          for (std::size_t phase = 0; phase < arrived.size(); ++phase) {
            if (comm.rank() == static_cast<int>(phase) % ranks) std::this_thread::sleep_for(5ms);  // a late rank
            ++arrived[phase];
            comm.barrier();
            if (arrived[phase].load() != ranks) ++early;
          }
        },
        quick(30000ms));
    CHECK(early == 0);
  }
}

TEST_CASE("tags separate messages; one tag keeps its order") {
  chorus::run_threads(
      2,
      [](communicator& comm) {
        if (comm.rank() == 0) {
          const std::array<int, 1> five{5}, three{3}, first{100}, second{200};
          comm.send(std::span(five), 1, 5);
          comm.send(std::span(three), 1, 3);
          comm.send(std::span(first), 1, 9);
          comm.send(std::span(second), 1, 9);
        } else {
          std::array<int, 1> value{};
          comm.recv(std::span(value), 0, 3);
          CHECK(value[0] == 3);
          comm.recv(std::span(value), 0, 5);
          CHECK(value[0] == 5);
          comm.recv(std::span(value), 0, 9);
          CHECK(value[0] == 100);
          comm.recv(std::span(value), 0, 9);
          CHECK(value[0] == 200);
        }
      },
      quick(30000ms));
}

TEST_CASE("a message of the wrong size is a mismatch error, and the communicator goes on") {
  chorus::run_threads(
      2,
      [](communicator& comm) {
        const std::vector<int> ten(10, 7);
        if (comm.rank() == 0) {
          comm.send(std::span(ten), 1, 1);
          comm.send(std::span(ten), 1, 2);
          comm.send(std::span(ten), 1, 3);
          return;
        }
        std::vector<int> eight(8), twelve(12), exact(10);
        chorus_test::expect_error([&] { comm.recv(std::span(eight), 0, 1); }, chorus::errc::mismatch,
                                  "larger than the receive buffer");
        chorus_test::expect_error([&] { comm.recv(std::span(twelve), 0, 2); }, chorus::errc::mismatch,
                                  "expected 48 bytes, received 40");
        comm.recv(std::span(exact), 0, 3);
        CHECK(exact == ten);
      },
      quick(30000ms));
}

TEST_CASE("a receive nobody answers times out with an error naming rank, peer and operation") {
  chorus::run_threads(
      2,
      [](communicator& comm) {
        if (comm.rank() == 1) {
          std::array<int, 1> value{};
          const auto start = steady::now();
          try {
            comm.recv(std::span(value), 0, 77);
            FAIL("received a message nobody sent");
          } catch (const chorus::error& failure) {
            CHECK(failure.category() == chorus::errc::timeout);
            CHECK(failure.rank() == 1);
            CHECK(failure.peer() == 0);
            CHECK(failure.operation() == "recv");
          }
          const auto waited = steady::now() - start;
          CHECK(waited >= 300ms);
          CHECK(waited < 3s);
        } else {
          std::this_thread::sleep_for(1s);  // alive, just silent
        }
      },
      quick(300ms));
}

TEST_CASE("invalid peers and tags are invalid_argument errors") {
  chorus::run_threads(
      2,
      [](communicator& comm) {
        std::array<int, 1> value{};
        chorus_test::expect_error([&] { comm.send(std::span(value), 2); }, chorus::errc::invalid_argument,
                                  "peer 2 is not in [0, 2)");
        chorus_test::expect_error([&] { comm.recv(std::span(value), -1); }, chorus::errc::invalid_argument,
                                  "peer -1 is not in [0, 2)");
        chorus_test::expect_error([&] { comm.send(std::span(value), 1 - comm.rank(), 524288); },
                                  chorus::errc::invalid_argument, "tag 524288 is not in [0, 524287]");
      },
      quick(30000ms));
}

TEST_CASE("non-blocking receives complete in whatever order the senders choose") {
  const int ranks = 5;
  chorus::run_threads(
      ranks,
      [&](communicator& comm) {
        if (comm.rank() == 0) {
          std::vector<std::vector<std::uint32_t>> incoming(ranks, std::vector<std::uint32_t>(1001));
          std::vector<communicator::request> requests;
          for (int peer = 1; peer < ranks; ++peer)
            requests.push_back(comm.irecv(std::span(incoming[static_cast<std::size_t>(peer)]), peer));
          std::vector<int> completion_order;
          const auto deadline = steady::now() + 10s;
          while (completion_order.size() < requests.size() && steady::now() < deadline)
            for (std::size_t i = 0; i < requests.size(); ++i)
              if (std::find(completion_order.begin(), completion_order.end(), int(i)) == completion_order.end() &&
                  comm.test(requests[i]))
                completion_order.push_back(static_cast<int>(i));
          REQUIRE(completion_order.size() == requests.size());
          CHECK(completion_order.front() == ranks - 2);  // the last peer sends first
          for (int peer = 1; peer < ranks; ++peer)
            CHECK(chorus_test::count_wrong(incoming[static_cast<std::size_t>(peer)], peer, 0, 0) == 0);
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(60 * (ranks - comm.rank())));
          const auto values = chorus_test::patterned(comm.rank(), 0, 0, 1001);
          comm.send(std::span(values), 0);
        }
      },
      quick(30000ms));
}

TEST_CASE("split: groups by color, orders by key, and works on its own") {
  const int ranks = 7;
  std::atomic<std::size_t> wrong{0};
  chorus::run_threads(
      ranks,
      [&](communicator& world) {
        const int color = world.rank() == 6 ? -1 : world.rank() % 3;  // rank 6 opts out
        communicator group = world.split(color, -world.rank());
        if (color < 0) {
          CHECK_FALSE(group.valid());
          return;
        }
        // Colors 0: {0,3}, 1: {1,4}, 2: {2,5}; key -rank puts the higher world rank first.
        REQUIRE(group.valid());
        CHECK(group.size() == 2);
        CHECK(group.rank() == (world.rank() >= 3 ? 0 : 1));
        CHECK(group.world_rank(group.rank()) == world.rank());
        CHECK(group.id() != world.id());
        wrong += chorus_test::all_pairs_exchange(group);
        group.barrier();
        communicator single = group.split(group.rank(), 0);  // split of a split
        CHECK(single.size() == 1);
        wrong += chorus_test::all_pairs_exchange(single);
      },
      quick(30000ms));
  CHECK(wrong == 0);
}

TEST_CASE("two communicators over one transport never take each other's messages") {
  chorus::run_threads(
      3,
      [](communicator& world) {
        communicator twin = world.split(0, world.rank());  // same members, another id
        REQUIRE(twin.size() == world.size());
        const int next = (world.rank() + 1) % 3, previous = (world.rank() + 2) % 3;
        const std::array<int, 1> on_world{1000 + world.rank()}, on_twin{2000 + world.rank()};
        auto first = twin.isend(std::span(on_twin), next, 4);
        auto second = world.isend(std::span(on_world), next, 4);
        std::array<int, 1> from_world{}, from_twin{};
        world.recv(std::span(from_world), previous, 4);
        twin.recv(std::span(from_twin), previous, 4);
        world.wait(first);
        world.wait(second);
        CHECK(from_world[0] == 1000 + previous);
        CHECK(from_twin[0] == 2000 + previous);
      },
      quick(30000ms));
}

TEST_CASE("every progress mode delivers") {
  for (auto mode : {chorus::transport::progress_mode::spin, chorus::transport::progress_mode::yield,
                    chorus::transport::progress_mode::block}) {
    CAPTURE(chorus::transport::to_string(mode));
    chorus::options options = quick(30000ms);
    options.progress = mode;
    std::atomic<std::size_t> wrong{0};
    chorus::run_threads(
        3,
        [&](communicator& comm) {
          CHECK(comm.config().progress == mode);
          wrong += chorus_test::all_pairs_exchange(comm);
          comm.barrier();
        },
        options);
    CHECK(wrong == 0);
  }
}

TEST_CASE("a rank that leaves mid-receive: the others get an error, not a hang") {
  std::atomic<int> errors{0};
  const auto start = steady::now();
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        if (comm.rank() == 2) return;  // leaves without sending
        std::array<int, 4> values{};
        try {
          comm.recv(std::span(values), 2);
        } catch (const chorus::error& failure) {
          const bool expected =
              failure.category() == chorus::errc::timeout || failure.category() == chorus::errc::peer_failure;
          CHECK(expected);
          CHECK(failure.peer() == 2);
          ++errors;
        }
      },
      quick(1000ms));
  CHECK(errors == 2);
  CHECK(steady::now() - start < 10s);
}

TEST_CASE("the UCX transport moves host memory") {
  chorus::run_threads(
      1,
      [](communicator& comm) {
        CHECK(comm.transport().memory_kinds().contains(chorus::memory_kind::host));
        CHECK(comm.transport().memory_kinds().contains(chorus::memory_kind::cuda_pinned));
      },
      quick(30000ms));
}

TEST_CASE("the UCX transport says how it registers a buffer: host memory as host memory, remembered") {
  chorus::run_threads(
      1,
      [](communicator& comm) {
        auto& network = comm.transport();
        std::vector<float> values(1000, 1.0f);
        // Asked of UCX (ucp_mem_map, ucp_mem_query): plain host memory is host
        // memory to every UCX, with or without CUDA support.
        CHECK(network.registered_kind(values.data(), values.size() * sizeof(float)) == chorus::memory_kind::host);
        CHECK(network.registered_kind(values.data(), values.size() * sizeof(float)) == chorus::memory_kind::host);
        CHECK(network.registered_kind(values.data() + 1, 4) == chorus::memory_kind::host);
        CHECK(network.registered_kind(nullptr, 0) == chorus::memory_kind::host);  // nothing to map
        // More buffers than it remembers: the oldest answers are asked again.
        std::vector<std::vector<std::byte>> many(chorus::ucx::registered_kinds::remembered + 3,
                                                 std::vector<std::byte>(64));
        for (const auto& buffer : many)
          CHECK(network.registered_kind(buffer.data(), buffer.size()) == chorus::memory_kind::host);
        CHECK(network.registered_kind(many.front().data(), 64) == chorus::memory_kind::host);
      },
      quick(30000ms));
  // UCX's memory types as chorus reads them.
  CHECK(chorus::ucx::kind_of_ucs_type(UCS_MEMORY_TYPE_CUDA) == chorus::memory_kind::cuda_device);
  CHECK(chorus::ucx::kind_of_ucs_type(UCS_MEMORY_TYPE_CUDA_MANAGED) == chorus::memory_kind::cuda_device);
  CHECK(chorus::ucx::kind_of_ucs_type(UCS_MEMORY_TYPE_HOST) == chorus::memory_kind::host);
  CHECK(chorus::ucx::kind_of_ucs_type(UCS_MEMORY_TYPE_UNKNOWN) == chorus::memory_kind::host);
}

TEST_CASE("init() rejects a bad CHORUS_* variable before the first collective") {
  ::setenv("CHORUS_ALLREDUCE_ALGO", "Ring!", 1);
  chorus_test::expect_error([] { chorus::run_threads(2, [](chorus::communicator&) {}, chorus_test::quick()); },
                            chorus::errc::invalid_argument, "in init: CHORUS_ALLREDUCE_ALGO='Ring!'");
  ::unsetenv("CHORUS_ALLREDUCE_ALGO");
}

// The chorus backend for torch.distributed joins this way: rank 0 hosts the
// store on any free port and publishes where; the others look it up (here a
// promise stands in for torch's store).
TEST_CASE("a store rendezvous: rank 0 hosts on any port and publishes it, the others look it up") {
  constexpr int ranks = 3;
  std::promise<chorus::bootstrap::address> published;
  std::shared_future<chorus::bootstrap::address> where = published.get_future().share();
  std::atomic<int> lookups{0};
  std::atomic<std::size_t> wrong{0};
  std::vector<std::thread> threads;
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      chorus::bootstrap::launch_info info;
      info.rank = rank;
      info.size = ranks;
      info.local_size = ranks;
      info.token = "rendezvous-test";
      if (rank == 0) info.store = chorus::bootstrap::address{"0.0.0.0", 0};
      info.rendezvous = chorus::bootstrap::store_rendezvous{
          [&](const chorus::bootstrap::address& hosted) { published.set_value(hosted); },
          [&] {
            ++lookups;
            REQUIRE(where.wait_for(30s) == std::future_status::ready);  // never a hang, even if rank 0 fails
            return where.get();
          }};
      communicator comm = chorus::connect(info, quick(30000ms));
      wrong += chorus_test::all_pairs_exchange(comm);
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(where.get().port != 0);
  CHECK(lookups == ranks - 1);
  CHECK(wrong == 0);
}

TEST_CASE("a rank that is neither told the store nor given a rendezvous gets a clear error") {
  chorus::bootstrap::launch_info info;
  info.rank = 1;
  info.size = 2;
  chorus_test::expect_error([&] { chorus::connect(info, quick()); }, chorus::errc::invalid_argument,
                            "no store address for a job of 2 ranks");
}

TEST_CASE("receive from any source: every sender once, its rank reported, 1..6 ranks and empty messages") {
  for (int ranks = 1; ranks <= 6; ++ranks) {
    CAPTURE(ranks);
    std::atomic<int> wrong{0};
    chorus::run_threads(
        ranks,
        [&](communicator& comm) {
          if (comm.rank() != 0) {
            const std::vector<int> mine(static_cast<std::size_t>(comm.rank() % 3), comm.rank());  // 0, 1 or 2 ints
            comm.send(std::span<const int>(mine), 0, 7);
            return;
          }
          std::vector<int> seen;
          for (int k = 1; k < comm.size(); ++k) {
            std::vector<int> into(2, -1);
            auto received = comm.irecv_any(std::span(into), 7);
            comm.wait(received, "recv any");
            const int from = comm.source_of(received);
            seen.push_back(from);
            const std::size_t expected = static_cast<std::size_t>(from % 3);
            wrong += received.received_bytes() != expected * sizeof(int);
            for (std::size_t i = 0; i < expected; ++i) wrong += into[i] != from;
          }
          std::sort(seen.begin(), seen.end());
          for (int k = 1; k < comm.size(); ++k) wrong += seen[static_cast<std::size_t>(k - 1)] != k;
        },
        quick());
    CHECK(wrong.load() == 0);
  }
}

TEST_CASE("monitored_barrier: passes when all come; names the ranks that do not, on rank 0 and the others") {
  SUBCASE("all arrive, 1..5 ranks") {
    for (int ranks = 1; ranks <= 5; ++ranks)
      chorus::run_threads(ranks, [](communicator& comm) { chorus::monitored_barrier(comm, 5000ms); }, quick());
  }
  SUBCASE("rank 2 of 4 stays away: rank 0 names it, the others hear of it") {
    chorus::run_threads(
        4,
        [](communicator& comm) {
          if (comm.rank() == 2) return std::this_thread::sleep_for(600ms);  // never calls it
          if (comm.rank() == 0)
            chorus_test::expect_error([&] { chorus::monitored_barrier(comm, 300ms); }, chorus::errc::timeout,
                                      "rank 2 failed to pass monitored_barrier within 300 ms");
          else
            chorus_test::expect_error([&] { chorus::monitored_barrier(comm, 5000ms); }, chorus::errc::timeout,
                                      "rank 0 reports that others did not");
        },
        quick());
  }
  SUBCASE("wait_all names every rank that stays away") {
    chorus::run_threads(
        4,
        [](communicator& comm) {
          if (comm.rank() >= 2) return std::this_thread::sleep_for(600ms);
          try {
            chorus::monitored_barrier(comm, 300ms, {.wait_all = true});
            FAIL("monitored_barrier passed without ranks 2 and 3");
          } catch (const chorus::error& failure) {
            CHECK(failure.category() == chorus::errc::timeout);
            if (comm.rank() == 0)
              CHECK(std::string(failure.what()).find("ranks 2, 3 failed to pass") != std::string::npos);
          }
        },
        quick());
  }
  SUBCASE("rank 0 stays away: every other rank names it") {
    chorus::run_threads(
        3,
        [](communicator& comm) {
          if (comm.rank() == 0) return std::this_thread::sleep_for(600ms);
          try {
            chorus::monitored_barrier(comm, 300ms);
            FAIL("monitored_barrier passed without rank 0");
          } catch (const chorus::error& failure) {
            CHECK(failure.category() == chorus::errc::timeout);
            CHECK(failure.peer() == 0);
            CHECK(std::string(failure.what()).find("rank 0 did not answer within 600 ms") != std::string::npos);
          }
        },
        quick());
  }
}
