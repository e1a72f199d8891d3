// Every collective and every algorithm over real UCX, 1..9 ranks as threads,
// against serial references (collective_cases.hpp), with bitwise identity of
// the results across ranks.
#include "collective_cases.hpp"
#include "expect_error.hpp"
#include "support.hpp"

#include <doctest/doctest.h>

#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <tuple>

using chorus::communicator;
using namespace chorus_test;
using namespace std::chrono_literals;

namespace {

const chorus::algorithm allreduce_algorithms[] = {chorus::algo::ring, chorus::algo::recursive_doubling,
                                                  chorus::algo::rabenseifner, chorus::algo::tree,
                                                  chorus::algo::shared_memory};

std::vector<std::size_t> counts_for(int n, bool large) {
  std::vector<std::size_t> counts{0, 1, static_cast<std::size_t>(n - 1 > 0 ? n - 1 : 2),
                                  static_cast<std::size_t>(n + 1)};
  if (large) counts.push_back(99991);  // an odd prime near 10^5
  return counts;
}

// What every rank saw, to check bitwise identity after the threads finish.
struct fingerprints {
  std::mutex mutex;
  std::map<std::string, std::map<int, std::uint64_t>> seen;
  void add(const std::string& key, int rank, std::uint64_t print) {
    std::lock_guard lock(mutex);
    seen[key][rank] = print;
  }
  std::size_t disagreements() {
    std::size_t bad = 0;
    for (auto& [key, by_rank] : seen)
      for (auto& [rank, print] : by_rank)
        if (print != by_rank.begin()->second) {
          ++bad;
          MESSAGE("ranks disagree on " << key);
        }
    return bad;
  }
};

struct tally {
  std::mutex mutex;
  std::size_t checked = 0, wrong = 0;
  std::vector<std::string> failures;
  void record(const std::string& what, std::size_t bad) {
    std::lock_guard lock(mutex);
    ++checked;
    wrong += bad;
    if (bad && failures.size() < 20) failures.push_back(what + ": " + std::to_string(bad) + " wrong");
  }
  void report() {
    for (auto& failure : failures) MESSAGE(failure);
    CHECK(checked > 0);
    CHECK(wrong == 0);
  }
};

template <class T, class Op>
void allreduce_case(communicator& comm, chorus::algorithm algorithm, std::size_t count, Op op, flavour kind,
                    std::uint64_t seed, tally& results, fingerprints& prints) {
  std::vector<T> data = inputs<T>(comm.rank(), count, seed, kind);
  const auto used = chorus::allreduce(comm, std::span(data), op, algorithm);
  const auto expected = reference<T>(all_ranks(comm.size()), count, seed, kind, op);
  const std::string key = std::string(chorus::to_string(chorus::dtype_of<T>)) + " " +
                          std::string(chorus::op::name_of<Op>()) + " " + std::string(chorus::to_string(algorithm)) +
                          " n=" + std::to_string(comm.size()) + " count=" + std::to_string(count);
  results.record(key, count_different(data, expected) + (used != algorithm));
  prints.add(key, comm.rank(), fingerprint(data.data(), data.size() * sizeof(T)));
}

// Out of place: `output` holds the serial reference (its tail past `count`
// untouched), `input` is as it was, and every rank has the same bits.
template <class T, class Op>
void allreduce_out_of_place_case(communicator& comm, chorus::algorithm algorithm, std::size_t count, Op op,
                                 std::uint64_t seed, tally& results, fingerprints& prints) {
  const std::vector<T> input = inputs<T>(comm.rank(), count, seed, flavour::general);
  const T untouched = static_cast<T>(-3.0f);
  std::vector<T> output(count + 2, untouched);
  const auto used = chorus::allreduce(comm, std::span(input), std::span(output), op, algorithm);
  auto expected = reference<T>(all_ranks(comm.size()), count, seed, flavour::general, op);
  expected.resize(count + 2, untouched);
  const std::string key = "out of place " + std::string(chorus::to_string(chorus::dtype_of<T>)) + " " +
                          std::string(chorus::op::name_of<Op>()) + " " + std::string(chorus::to_string(algorithm)) +
                          " n=" + std::to_string(comm.size()) + " count=" + std::to_string(count);
  results.record(key, count_different(output, expected) +
                          count_different(input, inputs<T>(comm.rank(), count, seed, flavour::general)) +
                          (used != algorithm));
  prints.add(key, comm.rank(), fingerprint(output.data(), count * sizeof(T)));
}

// Out of place over the paths an algorithm can take: reductions in the
// type itself and finished (avg), and half, reduced in a float copy.
void allreduce_out_of_place(communicator& comm, chorus::algorithm algorithm, std::size_t count, std::uint64_t seed,
                            tally& results, fingerprints& prints) {
  allreduce_out_of_place_case<float>(comm, algorithm, count, chorus::op::sum{}, seed + 5, results, prints);
  allreduce_out_of_place_case<std::int32_t>(comm, algorithm, count, chorus::op::avg{}, seed + 6, results, prints);
  allreduce_out_of_place_case<chorus::half>(comm, algorithm, count, chorus::op::sum{}, seed + 7, results, prints);
}

template <class T>
void allreduce_type(communicator& comm, chorus::algorithm algorithm, std::size_t count, std::uint64_t seed,
                    tally& results, fingerprints& prints) {
  allreduce_case<T>(comm, algorithm, count, chorus::op::sum{}, flavour::general, seed, results, prints);
  allreduce_case<T>(comm, algorithm, count, chorus::op::max{}, flavour::general, seed + 1, results, prints);
}

template <class T>
void allreduce_all_ops(communicator& comm, chorus::algorithm algorithm, std::size_t count, std::uint64_t seed,
                       tally& results, fingerprints& prints) {
  allreduce_type<T>(comm, algorithm, count, seed, results, prints);
  allreduce_case<T>(comm, algorithm, count, chorus::op::min{}, flavour::general, seed + 2, results, prints);
  allreduce_case<T>(comm, algorithm, count, chorus::op::avg{}, flavour::general, seed + 3, results, prints);
  allreduce_case<T>(comm, algorithm, count, chorus::op::prod{}, flavour::product, seed + 4, results, prints);
}

// Every element type (float and int32 with every op, the others with sum and max).
void allreduce_every_type(communicator& comm, chorus::algorithm algorithm, std::size_t count, std::uint64_t seed,
                          tally& results, fingerprints& prints) {
  allreduce_all_ops<float>(comm, algorithm, count, seed, results, prints);
  allreduce_all_ops<std::int32_t>(comm, algorithm, count, seed, results, prints);
  allreduce_type<double>(comm, algorithm, count, seed, results, prints);
  allreduce_type<chorus::half>(comm, algorithm, count, seed, results, prints);
  allreduce_type<chorus::bfloat16>(comm, algorithm, count, seed, results, prints);
  allreduce_type<std::int8_t>(comm, algorithm, count, seed, results, prints);
  allreduce_type<std::int16_t>(comm, algorithm, count, seed, results, prints);
  allreduce_type<std::int64_t>(comm, algorithm, count, seed, results, prints);
  allreduce_type<std::uint8_t>(comm, algorithm, count, seed, results, prints);
  allreduce_type<std::uint32_t>(comm, algorithm, count, seed, results, prints);
  allreduce_type<std::uint64_t>(comm, algorithm, count, seed, results, prints);
}

void run_for_each_rank_count(const std::function<void(communicator&)>& body, int most = 9) {
  for (int ranks = 1; ranks <= most; ++ranks) {
    CAPTURE(ranks);
    chorus::run_threads(ranks, body, quick());
  }
}

}  // namespace

namespace {

// Each algorithm its own case, named collective/algorithm, each rank count
// a subcase, so that one runs alone:
//   test_collectives_threads -tc="allreduce/rabenseifner*" -sc="5 ranks"
void for_each_rank_count_subcase(const std::function<void(communicator&)>& body) {
  for (int ranks = 1; ranks <= 9; ++ranks) SUBCASE((std::to_string(ranks) + " ranks").c_str()) {
      chorus::run_threads(ranks, body, quick());
    }
}

// Every element type and op against the serial reference, counts 0, 1,
// n-1, n+1, odd and several MiB, the same bits on every rank.
void allreduce_with(chorus::algorithm algorithm) {
  tally results;
  fingerprints prints;
  for_each_rank_count_subcase([&](communicator& comm) {
    std::uint64_t seed = 100;
    for (const std::size_t count : counts_for(comm.size(), true)) {
      seed += 10;
      allreduce_every_type(comm, algorithm, count, seed, results, prints);
      allreduce_out_of_place(comm, algorithm, count, seed, results, prints);
    }
    // Several MiB, so the ring cuts blocks into many pipelined segments.
    const std::size_t large = (3u << 20) / 4 + 7;
    allreduce_case<float>(comm, algorithm, large, chorus::op::sum{}, flavour::general, 7, results, prints);
    allreduce_case<std::int32_t>(comm, algorithm, large, chorus::op::max{}, flavour::general, 8, results, prints);
    allreduce_out_of_place_case<float>(comm, algorithm, large, chorus::op::sum{}, 9, results, prints);
  });
  results.report();
  CHECK(prints.disagreements() == 0);
}

}  // namespace

TEST_CASE("allreduce/ring: every type and op against the serial reference, identical on all ranks") {
  allreduce_with(chorus::algo::ring);
}
TEST_CASE("allreduce/recursive_doubling: every type and op against the serial reference, identical on all ranks") {
  allreduce_with(chorus::algo::recursive_doubling);
}
TEST_CASE("allreduce/rabenseifner: every type and op against the serial reference, identical on all ranks") {
  allreduce_with(chorus::algo::rabenseifner);
}
TEST_CASE("allreduce/tree: every type and op against the serial reference, identical on all ranks") {
  allreduce_with(chorus::algo::tree);
}
TEST_CASE("allreduce/shared_memory: every type and op against the serial reference, identical on all ranks") {
  allreduce_with(chorus::algo::shared_memory);
}

// The small-message form: every type and op up to its limit (a slot's worth
// of float accumulators for half), calls of the chunked form in between on
// the same slots, and a clear error past the limit.
TEST_CASE(
    "allreduce/shared_memory_small: every type and op to its limit, between chunked calls, identical on all ranks") {
  tally results;
  fingerprints prints;
  const auto small = chorus::algo::shared_memory_small;
  for_each_rank_count_subcase([&](communicator& comm) {
    std::uint64_t seed = 500;
    std::vector<std::size_t> counts = counts_for(comm.size(), false);
    counts.push_back(1003);
    for (const std::size_t count : counts) {
      seed += 10;
      allreduce_every_type(comm, small, count, seed, results, prints);
      allreduce_out_of_place(comm, small, count, seed, results, prints);
    }
    allreduce_case<float>(comm, small, (256u << 10) / 4, chorus::op::sum{}, flavour::general, 7, results, prints);
    allreduce_case<chorus::half>(comm, small, (256u << 10) / 2, chorus::op::sum{}, flavour::general, 8, results,
                                 prints);
    for (int i = 0; i < 7; ++i) {
      const bool chunked = i % 3 == 1;  // several steps, so the two forms meet on both slots
      allreduce_case<float>(comm, chunked ? chorus::algo::shared_memory : small,
                            chunked ? 200003 : 100 + static_cast<std::size_t>(i) * 9001, chorus::op::sum{},
                            flavour::general, 20 + static_cast<std::uint64_t>(i), results, prints);
    }
    std::vector<float> too_large((256u << 10) / 4 + 1, 1.0f);
    expect_error([&] { chorus::allreduce(comm, std::span(too_large), small); }, chorus::errc::invalid_argument,
                 "needs every rank on one host and at most 256 KiB, and this call is 262148 bytes on 1 host");
  });
  results.report();
  CHECK(prints.disagreements() == 0);
}

// Allgather, reduce_scatter (sum and integer avg) and broadcast from three
// roots, hierarchical, against the serial references.
void hierarchical_gather_scatter_broadcast(communicator& comm, tally& results) {
  const auto algorithm = chorus::algo::hierarchical;
  const int n = comm.size();
  for (const std::size_t count :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{40009}, std::size_t{200003}}) {
    const std::size_t total = count * static_cast<std::size_t>(n);
    std::vector<float> expected_all;
    for (int r = 0; r < n; ++r) {
      const auto theirs = inputs<float>(r, count, 21, flavour::general);
      expected_all.insert(expected_all.end(), theirs.begin(), theirs.end());
    }
    std::vector<float> all(total, -5.0f);
    const auto used =
        chorus::allgather(comm, std::span<const float>(inputs<float>(comm.rank(), count, 21, flavour::general)),
                          std::span(all), algorithm);
    results.record("hierarchical allgather", count_different(all, expected_all) + (used != algorithm));

    const auto input = inputs<chorus::bfloat16>(comm.rank(), total, 23, flavour::general);
    std::vector<chorus::bfloat16> output(count);
    chorus::reduce_scatter(comm, std::span(input), std::span(output), chorus::op::sum{}, algorithm);
    const auto full = reference<chorus::bfloat16>(all_ranks(n), total, 23, flavour::general, chorus::op::sum{});
    results.record("hierarchical reduce_scatter",
                   count_different(output, std::vector<chorus::bfloat16>(
                                               full.begin() + static_cast<std::ptrdiff_t>(count * comm.rank()),
                                               full.begin() + static_cast<std::ptrdiff_t>(count * (comm.rank() + 1)))));
    const auto ints = inputs<std::int32_t>(comm.rank(), total, 25, flavour::general);
    std::vector<std::int32_t> averaged(count);
    chorus::reduce_scatter(comm, std::span(ints), std::span(averaged), chorus::op::avg{}, algorithm);
    const auto full_avg = reference<std::int32_t>(all_ranks(n), total, 25, flavour::general, chorus::op::avg{});
    results.record(
        "hierarchical reduce_scatter avg",
        count_different(averaged, std::vector<std::int32_t>(
                                      full_avg.begin() + static_cast<std::ptrdiff_t>(count * comm.rank()),
                                      full_avg.begin() + static_cast<std::ptrdiff_t>(count * (comm.rank() + 1)))));
    for (const int root : {0, n - 1, n / 2}) {
      auto data = comm.rank() == root ? inputs<chorus::half>(root, count, 9, flavour::general)
                                      : std::vector<chorus::half>(count, chorus::half(-99.0f));
      chorus::broadcast(comm, std::span(data), root, algorithm);
      results.record("hierarchical broadcast",
                     count_different(data, inputs<chorus::half>(root, count, 9, flavour::general)));
    }
  }
}

// Hosts simulated on this machine (options::local_size): h hosts of L ranks.
void run_on_hosts(int hosts, int per_host, const std::function<void(communicator&)>& body) {
  CAPTURE(hosts);
  CAPTURE(per_host);
  chorus::options settings = quick();
  settings.local_size = per_host;
  chorus::run_threads(hosts * per_host, body, settings);
}

TEST_CASE("allreduce/hierarchical: hosts of 2 and 3 ranks, every type and op, odd counts, same bits everywhere") {
  tally results;
  fingerprints prints;
  for (const auto& [hosts, per_host] : {std::pair{2, 2}, std::pair{3, 2}, std::pair{2, 3}, std::pair{3, 3}}) {
    run_on_hosts(hosts, per_host, [&](communicator& comm) {
      REQUIRE(comm.layout().hosts == hosts);
      REQUIRE(comm.layout().ranks_per_host == per_host);
      const auto algorithm = chorus::algo::hierarchical;
      std::uint64_t seed = 300;
      for (const std::size_t count : counts_for(comm.size(), true)) {
        seed += 10;
        allreduce_every_type(comm, algorithm, count, seed, results, prints);
        allreduce_out_of_place(comm, algorithm, count, seed, results, prints);
      }
      // Several slots' worth, so the shared-memory steps wrap their two slots.
      allreduce_case<float>(comm, algorithm, (3u << 20) / 4 + 7, chorus::op::sum{}, flavour::general, 7, results,
                            prints);
      allreduce_out_of_place_case<float>(comm, algorithm, (3u << 20) / 4 + 7, chorus::op::sum{}, 9, results, prints);
      hierarchical_gather_scatter_broadcast(comm, results);
      // The table picks it for large buffers on such hosts, shared memory never.
      std::vector<float> large(1u << 16, 1.0f);
      results.record("automatic across hosts", chorus::allreduce(comm, large) != chorus::algo::hierarchical);
      expect_error(
          [&] { chorus::allreduce(comm, large, chorus::algo::shared_memory); }, chorus::errc::invalid_argument,
          "needs every rank on one host, and this call is 262144 bytes on " + std::to_string(hosts) + " hosts");
    });
  }
  results.report();
  CHECK(prints.disagreements() == 0);
}

// Allreduce and allgather of `count` floats per rank, reduce_scatter of
// `block` per rank and broadcast of `count` from `root`, each checked
// against its serial reference (a wrong element, or an algorithm other than
// `expect` says for it, counts in `results`).
struct four_algorithms {
  chorus::algorithm allreduce, allgather, reduce_scatter, broadcast;
};
void four_collectives_checked(communicator& comm, std::size_t count, std::size_t block, int root, int seed,
                              const four_algorithms& expect, tally& results) {
  const int n = comm.size();
  std::vector<float> data = inputs<float>(comm.rank(), count, seed, flavour::general);
  const auto expected = reference<float>(all_ranks(n), count, seed, flavour::general, chorus::op::sum{});
  const auto reduced = chorus::allreduce(comm, std::span(data));
  results.record("allreduce " + std::string(chorus::to_string(expect.allreduce)),
                 count_different(data, expected) + (reduced != expect.allreduce));

  std::vector<float> all(count * static_cast<std::size_t>(n)), expected_all;
  const auto mine = inputs<float>(comm.rank(), count, seed + 1, flavour::general);
  for (int r = 0; r < n; ++r) {
    const auto theirs = inputs<float>(r, count, seed + 1, flavour::general);
    expected_all.insert(expected_all.end(), theirs.begin(), theirs.end());
  }
  const auto gathered = chorus::allgather(comm, std::span(mine), std::span(all));
  results.record("allgather " + std::string(chorus::to_string(expect.allgather)),
                 count_different(all, expected_all) + (gathered != expect.allgather));

  const std::size_t total = block * static_cast<std::size_t>(n);
  const auto input = inputs<float>(comm.rank(), total, seed + 2, flavour::general);
  const auto full = reference<float>(all_ranks(n), total, seed + 2, flavour::general, chorus::op::sum{});
  std::vector<float> output(block);
  const auto scattered = chorus::reduce_scatter(comm, std::span(input), std::span(output));
  const std::vector<float> my_block(full.begin() + static_cast<std::ptrdiff_t>(block * comm.rank()),
                                    full.begin() + static_cast<std::ptrdiff_t>(block * (comm.rank() + 1)));
  results.record("reduce_scatter " + std::string(chorus::to_string(expect.reduce_scatter)),
                 count_different(output, my_block) + (scattered != expect.reduce_scatter));

  const auto sent = inputs<float>(root, count, seed + 3, flavour::general);
  std::vector<float> message = comm.rank() == root ? sent : std::vector<float>(count);
  const auto spread = chorus::broadcast(comm, std::span(message), root);
  results.record("broadcast " + std::string(chorus::to_string(expect.broadcast)),
                 count_different(message, sent) + (spread != expect.broadcast));
}

// The debug lines chorus writes while `body` runs (log::set_sink), with
// debug lines on whatever CHORUS_DEBUG says.
std::vector<std::string> debug_lines_of(const std::function<void()>& body) {
  std::vector<std::string> lines;
  chorus::log::set_debug(true);
  chorus::log::set_sink(
      [&](int rank, std::string_view line) { lines.push_back("[" + std::to_string(rank) + "] " + std::string(line)); });
  try {
    body();
  } catch (...) {
    chorus::log::set_sink({});
    chorus::log::set_debug(false);
    throw;
  }
  chorus::log::set_sink({});
  chorus::log::set_debug(false);
  return lines;
}

std::size_t lines_containing(const std::vector<std::string>& lines, std::string_view text) {
  return static_cast<std::size_t>(
      std::count_if(lines.begin(), lines.end(), [&](const std::string& line) { return line.find(text) != line.npos; }));
}

TEST_CASE("hierarchical collectives choose between hosts as any call over that many ranks: CHORUS_TUNE reaches it") {
  // 3 hosts of 2 ranks; every call large enough that the 6-rank table picks
  // hierarchical. The rules for 3 ranks pick what the table would not
  // (tree, ring, ring, chain) for the call between the 3 hosts; the first
  // rule (hierarchical, for any allreduce) cannot run between hosts and is
  // passed over there.
  const std::string tune =
      "allreduce:16K-:hierarchical;allreduce@3:0-:tree;allgather@3:0-:ring;reduce_scatter@3:0-:ring;"
      "broadcast@3:0-:chain";
  const std::size_t count = 70001;  // floats: every call 16 KiB and more, between hosts too
  for (const bool tuned : {false, true}) {
    CAPTURE(tuned);
    tally results;
    const auto lines = debug_lines_of([&] {
      chorus::options settings = quick();
      settings.local_size = 2;
      if (tuned) settings.tune = tune;
      chorus::run_threads(
          6,
          [&](communicator& comm) {
            const auto hierarchical = chorus::algo::hierarchical;
            four_collectives_checked(comm, count, count / 6 + 1, 3, 31,
                                     {hierarchical, hierarchical, hierarchical, hierarchical}, results);
          },
          settings);
    });
    results.report();
    // Every rank chose between hosts for allreduce, allgather and
    // reduce_scatter; the root's peers (one per host) for broadcast: by the
    // rules for 3 ranks where tuned, else by the defaults.
    CHECK(lines_containing(lines, "allreduce between hosts") == 6);
    CHECK(lines_containing(lines, "allgather between hosts") == 6);
    CHECK(lines_containing(lines, "reduce_scatter between hosts") == 6);
    CHECK(lines_containing(lines, "broadcast between hosts") == 3);
    if (tuned) {
      CHECK(lines_containing(lines, "over 3 ranks: tree (options.tune allreduce@3:0-:tree)") == 6);
      CHECK(lines_containing(lines, "over 3 ranks: ring (options.tune allgather@3:0-:ring)") == 6);
      CHECK(lines_containing(lines, "over 3 ranks: ring (options.tune reduce_scatter@3:0-:ring)") == 6);
      CHECK(lines_containing(lines, "over 3 ranks: chain (options.tune broadcast@3:0-:chain)") == 3);
      CHECK(lines_containing(lines, "over 6 ranks: hierarchical (options.tune allreduce:16K-:hierarchical)") == 6);
    } else {
      for (const std::string& line : lines)
        if (line.find("between hosts") != line.npos) CHECK_MESSAGE(line.find(" (default ") != line.npos, line);
    }
  }
}

TEST_CASE("shared memory: automatic on one host, unequal hosts fall back to the network, two jobs at once") {
  tally results;
  run_on_hosts(1, 4, [&](communicator& comm) {
    std::vector<float> large(1u << 16, 1.0f);
    results.record("automatic on one host", chorus::allreduce(comm, large) != chorus::algo::shared_memory);
    std::vector<float> small(16, 1.0f);
    results.record("small takes one slot", chorus::allreduce(comm, small) != chorus::algo::shared_memory_small);
    results.record("small result", count_different(small, std::vector<float>(small.size(), 4.0f)));
    // Non-blocking calls run through a segment of their own, overlapping the caller's blocking ones.
    std::vector<float> overlapped(1u << 17, 2.0f);
    auto pending = chorus::iallreduce(comm, std::span(large));
    results.record("blocking beside non-blocking", chorus::allreduce(comm, overlapped) != chorus::algo::shared_memory);
    pending.wait();
    results.record("non-blocking result", count_different(large, std::vector<float>(large.size(), 16.0f)));
    results.record("blocking result", count_different(overlapped, std::vector<float>(overlapped.size(), 8.0f)));
  });
  // 5 ranks in hosts of 2: 2, 2 and 1 rank: no hierarchical choice, and forcing it is a clear error.
  chorus::options settings = quick();
  settings.local_size = 2;
  chorus::run_threads(
      5,
      [&](communicator& comm) {
        std::vector<float> large(1u << 16, 1.0f);
        const auto used = chorus::allreduce(comm, large);
        results.record("unequal hosts: " + std::string(chorus::to_string(used)),
                       (used == chorus::algo::hierarchical || used == chorus::algo::shared_memory) +
                           count_different(large, std::vector<float>(large.size(), 5.0f)));
        expect_error([&] { chorus::allreduce(comm, large, chorus::algo::hierarchical); },
                     chorus::errc::invalid_argument, "different numbers");
      },
      settings);
  // Two jobs of this process at once, each with its own segment.
  std::vector<std::thread> jobs;
  for (int job = 0; job < 2; ++job)
    jobs.emplace_back([&, job] {
      chorus::run_threads(
          3 + job,
          [&](communicator& comm) {
            for (int call = 0; call < 20; ++call) {
              auto data = inputs<float>(comm.rank(), 200003, 60 + static_cast<std::uint64_t>(call), flavour::general);
              chorus::allreduce(comm, std::span(data), chorus::algo::shared_memory);
              results.record("job " + std::to_string(job),
                             count_different(data, reference<float>(all_ranks(comm.size()), 200003,
                                                                    60 + static_cast<std::uint64_t>(call),
                                                                    flavour::general, chorus::op::sum{})));
            }
          },
          quick());
    });
  for (std::thread& job : jobs) job.join();
  results.report();
}

TEST_CASE("allreduce of random floats: within (n-1) u sum|x| of the exact sum, same bits everywhere") {
  // Any summation order of n floats is within gamma_{n-1} * sum |x_i| of the
  // exact sum (u = 2^-24); the bound below adds 1% for the gamma's denominator.
  tally results;
  fingerprints prints;
  run_for_each_rank_count([&](communicator& comm) {
    const std::size_t count = 4099;
    const auto values_of = [](int rank, std::size_t count_) {
      std::mt19937 random(static_cast<unsigned>(rank) * 31u + 5u);
      std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
      std::vector<float> values(count_);
      for (auto& value : values) value = uniform(random) * std::ldexp(1.0f, static_cast<int>(random() % 16) - 8);
      return values;
    };
    // The exact sums and magnitudes in double, once per rank count.
    std::vector<double> exact(count, 0.0), magnitude(count, 0.0);
    for (int r = 0; r < comm.size(); ++r) {
      const std::vector<float> theirs = values_of(r, count);
      for (std::size_t i = 0; i < count; ++i) {
        exact[i] += theirs[i];
        magnitude[i] += std::fabs(static_cast<double>(theirs[i]));
      }
    }
    for (const auto algorithm : allreduce_algorithms) {
      std::vector<float> data = values_of(comm.rank(), count);
      chorus::allreduce(comm, std::span(data), chorus::op::sum{}, algorithm);
      std::size_t outside = 0;
      for (std::size_t i = 0; i < count; ++i) {
        const double bound = (comm.size() - 1) * std::ldexp(1.0, -24) * magnitude[i] * 1.01;
        outside += std::fabs(data[i] - exact[i]) > bound;
      }
      const std::string key =
          "random sum " + std::string(chorus::to_string(algorithm)) + " n=" + std::to_string(comm.size());
      results.record(key, outside);
      prints.add(key, comm.rank(), fingerprint(data.data(), data.size() * 4));
    }
  });
  results.report();
  CHECK(prints.disagreements() == 0);
}

TEST_CASE("allreduce: out of place, user operators, containers and automatic choice") {
  tally results;
  fingerprints prints;
  run_for_each_rank_count([&](communicator& comm) {
    const std::size_t count = 1001;
    const auto input = inputs<std::int32_t>(comm.rank(), count, 5, flavour::general);
    std::vector<std::int32_t> output(count + 3, -77);
    const auto used = chorus::allreduce(comm, std::span(input), std::span(output), chorus::op::sum{});
    CHECK(used == chorus::choose_allreduce(comm.size(), count * 4).chosen);
    auto expected = reference<std::int32_t>(all_ranks(comm.size()), count, 5, flavour::general, chorus::op::sum{});
    expected.resize(count + 3, -77);  // the tail stays untouched
    results.record("out of place", count_different(output, expected));
    CHECK(input == inputs<std::int32_t>(comm.rank(), count, 5, flavour::general));  // input untouched

    std::vector<std::uint32_t> bits(257);
    for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = static_cast<std::uint32_t>(mix(i * 131 + comm.rank()));
    chorus::allreduce(comm, bits, [](std::uint32_t a, std::uint32_t b) { return a ^ b; });
    std::size_t wrong = 0;
    for (std::size_t i = 0; i < bits.size(); ++i) {
      std::uint32_t x = 0;
      for (int r = 0; r < comm.size(); ++r) x ^= static_cast<std::uint32_t>(mix(i * 131 + r));
      wrong += bits[i] != x;
    }
    results.record("user xor", wrong);
    prints.add("user xor n=" + std::to_string(comm.size()), comm.rank(), fingerprint(bits.data(), bits.size() * 4));
  });
  results.report();
  CHECK(prints.disagreements() == 0);
}

namespace {

// Broadcast from the first, last and middle rank against the root's data.
void broadcast_with(chorus::algorithm algorithm) {
  tally results;
  for_each_rank_count_subcase([&](communicator& comm) {
    const int n = comm.size();
    for (const int root : {0, n - 1, n / 2})
      for (const std::size_t count : counts_for(n, true)) {
        auto data = comm.rank() == root ? inputs<chorus::half>(root, count, 9, flavour::general)
                                        : std::vector<chorus::half>(count, chorus::half(-99.0f));
        const chorus::algorithm ran = chorus::broadcast(comm, std::span(data), root, algorithm);
        results.record("broadcast", count_different(data, inputs<chorus::half>(root, count, 9, flavour::general)) +
                                        (ran != algorithm));
      }
  });
  results.report();
}

}  // namespace

TEST_CASE("broadcast/tree: from every kind of root") { broadcast_with(chorus::algo::tree); }
TEST_CASE("broadcast/chain: from every kind of root") { broadcast_with(chorus::algo::chain); }
TEST_CASE("broadcast/shared_memory: from every kind of root") { broadcast_with(chorus::algo::shared_memory); }

TEST_CASE("reduce, gather and scatter from every kind of root") {
  tally results;
  run_for_each_rank_count([&](communicator& comm) {
    const int n = comm.size();
    for (const int root : {0, n - 1, n / 2}) {
      for (const std::size_t count : counts_for(n, true)) {
        const auto mine = inputs<double>(comm.rank(), count, 11, flavour::general);
        std::vector<double> reduced(count, -1.0);
        chorus::reduce(comm, std::span(mine), std::span(reduced), root, chorus::op::max{});
        if (comm.rank() == root)
          results.record("reduce max",
                         count_different(
                             reduced, reference<double>(all_ranks(n), count, 11, flavour::general, chorus::op::max{})));

        const auto block = inputs<std::int64_t>(comm.rank(), count, 13, flavour::general);
        std::vector<std::int64_t> gathered(count * static_cast<std::size_t>(n), -1);
        chorus::gather(comm, std::span(block), std::span(gathered), root);
        if (comm.rank() == root) {
          std::vector<std::int64_t> expected;
          for (int r = 0; r < n; ++r) {
            const auto theirs = inputs<std::int64_t>(r, count, 13, flavour::general);
            expected.insert(expected.end(), theirs.begin(), theirs.end());
          }
          results.record("gather", count_different(gathered, expected));
        }
        std::vector<std::int64_t> everything;
        for (int r = 0; r < n; ++r) {
          const auto part = inputs<std::int64_t>(r, count, 17, flavour::general);
          everything.insert(everything.end(), part.begin(), part.end());
        }
        std::vector<std::int64_t> piece(count, -1);
        chorus::scatter(comm, std::span<const std::int64_t>(everything), std::span(piece), root);
        results.record("scatter",
                       count_different(piece, inputs<std::int64_t>(comm.rank(), count, 17, flavour::general)));
      }
    }
  });
  results.report();
}

// The one ring pipeline (collective/machinery/ring_pipeline.hpp) with segments of a
// few elements and a window of two: many segments per block, the window
// reused many times, short last segments, empty blocks, and segments that
// must grow to fit the wire tag (100003 one-element segments at 7 ranks).
TEST_CASE("ring pipeline: tiny segments through a shallow window, for allreduce, reduce_scatter and allgather") {
  tally results;
  for (const int ranks : {2, 3, 5, 7}) {
    CAPTURE(ranks);
    chorus::run_threads(
        ranks,
        [&](communicator& comm) {
          const int n = comm.size();
          for (const chorus::collective::ring_settings settings :
               {chorus::collective::ring_settings{12, 2}, chorus::collective::ring_settings{4, 1}}) {
            const std::string shape = " segment=" + std::to_string(settings.segment_bytes) +
                                      "B depth=" + std::to_string(settings.depth) + " n=" + std::to_string(n);
            // 100003 elements (segments that must grow) at 7 ranks only: a
            // minute of the suite's time at every rank count, for one rule.
            std::vector<std::size_t> counts{0, 1, std::size_t(n - 1), 1000};
            if (n == 7) counts.push_back(100003);
            for (const std::size_t count : counts) {
              const std::uint64_t seed = 60 + count;
              const auto expected = reference<float>(all_ranks(n), count, seed, flavour::general, chorus::op::sum{});
              std::vector<float> data = inputs<float>(comm.rank(), count, seed, flavour::general);
              chorus::collective::exchange ring_call(comm, "ring pipeline test");
              chorus::collective::allreduce_by_ring(ring_call, std::span<const float>(data), std::span(data),
                                                    chorus::op::sum{}, settings);
              results.record("allreduce_ring count=" + std::to_string(count) + shape, count_different(data, expected));
              const auto input = inputs<float>(comm.rank(), count, seed, flavour::general);
              std::vector<float> output(count, -5.0f);
              chorus::collective::exchange out_of_place_call(comm, "ring pipeline test");
              chorus::collective::allreduce_by_ring(out_of_place_call, std::span(input), std::span(output),
                                                    chorus::op::sum{}, settings);
              results.record("allreduce_ring out of place count=" + std::to_string(count) + shape,
                             count_different(output, expected) +
                                 count_different(input, inputs<float>(comm.rank(), count, seed, flavour::general)));

              const std::size_t total = count * static_cast<std::size_t>(n);
              const auto full = reference<float>(all_ranks(n), total, seed + 1, flavour::general, chorus::op::sum{});
              std::vector<float> work = inputs<float>(comm.rank(), total, seed + 1, flavour::general);
              chorus::collective::exchange scatter_call(comm, "ring pipeline test");
              chorus::collective::reduce_scatter_by_ring(scatter_call, std::span(work), count, chorus::op::sum{},
                                                         settings);
              const auto mine = [&](const std::vector<float>& all) {
                const auto first =
                    all.begin() + static_cast<std::ptrdiff_t>(count * static_cast<std::size_t>(comm.rank()));
                return std::vector<float>(first, first + static_cast<std::ptrdiff_t>(count));
              };
              results.record("reduce_scatter_ring count=" + std::to_string(count) + shape,
                             count_different(mine(work), mine(full)));

              std::vector<float> expected_all, all(total, -5.0f);
              for (int r = 0; r < n; ++r) {
                const auto theirs = inputs<float>(r, count, seed + 2, flavour::general);
                expected_all.insert(expected_all.end(), theirs.begin(), theirs.end());
                if (r == comm.rank())
                  std::copy(theirs.begin(), theirs.end(),
                            all.begin() + static_cast<std::ptrdiff_t>(count * static_cast<std::size_t>(r)));
              }
              chorus::collective::exchange gather_call(comm, "ring pipeline test");
              chorus::collective::allgather_by_ring(gather_call, std::span(all), count, settings);
              results.record("allgather_ring count=" + std::to_string(count) + shape,
                             count_different(all, expected_all));
            }
          }
        },
        quick());
  }
  results.report();
}

namespace {

// Allgather against the concatenation of every rank's input.
void allgather_with(chorus::algorithm algorithm) {
  tally results;
  for_each_rank_count_subcase([&](communicator& comm) {
    const int n = comm.size();
    for (const std::size_t count : counts_for(n, true)) {
      std::vector<float> expected_all;
      for (int r = 0; r < n; ++r) {
        const auto theirs = inputs<float>(r, count, 21, flavour::general);
        expected_all.insert(expected_all.end(), theirs.begin(), theirs.end());
      }
      const auto mine = inputs<float>(comm.rank(), count, 21, flavour::general);
      std::vector<float> all(count * static_cast<std::size_t>(n), -5.0f);
      const chorus::algorithm ran = chorus::allgather(comm, std::span(mine), std::span(all), algorithm);
      results.record("allgather", count_different(all, expected_all) + (ran != algorithm));
    }
    chorus::barrier(comm);
  });
  results.report();
}

// Reduce_scatter of bfloat16 sums and int32 averages against the serial reference.
void reduce_scatter_with(chorus::algorithm algorithm) {
  tally results;
  for_each_rank_count_subcase([&](communicator& comm) {
    const int n = comm.size();
    for (const std::size_t count : counts_for(n, true)) {
      const std::size_t total = count * static_cast<std::size_t>(n);
      const auto input = inputs<chorus::bfloat16>(comm.rank(), total, 23, flavour::general);
      std::vector<chorus::bfloat16> output(count);
      const chorus::algorithm ran =
          chorus::reduce_scatter(comm, std::span(input), std::span(output), chorus::op::sum{}, algorithm);
      const auto full = reference<chorus::bfloat16>(all_ranks(n), total, 23, flavour::general, chorus::op::sum{});
      const std::vector<chorus::bfloat16> expected(
          full.begin() + static_cast<std::ptrdiff_t>(count * comm.rank()),
          full.begin() + static_cast<std::ptrdiff_t>(count * (comm.rank() + 1)));
      results.record("reduce_scatter bfloat16 sum", count_different(output, expected) + (ran != algorithm));

      const auto ints = inputs<std::int32_t>(comm.rank(), total, 25, flavour::general);
      std::vector<std::int32_t> averaged(count);
      chorus::reduce_scatter(comm, std::span(ints), std::span(averaged), chorus::op::avg{}, algorithm);
      const auto full_avg = reference<std::int32_t>(all_ranks(n), total, 25, flavour::general, chorus::op::avg{});
      std::size_t wrong = 0;
      for (std::size_t i = 0; i < count; ++i) wrong += averaged[i] != full_avg[count * comm.rank() + i];
      results.record("reduce_scatter int32 avg", wrong);
    }
    chorus::barrier(comm);
  });
  results.report();
}

}  // namespace

TEST_CASE("allgather/ring: against every rank's input") { allgather_with(chorus::algo::ring); }
TEST_CASE("allgather/recursive_doubling: against every rank's input") {
  allgather_with(chorus::algo::recursive_doubling);
}
TEST_CASE("allgather/shared_memory: against every rank's input") { allgather_with(chorus::algo::shared_memory); }
TEST_CASE("reduce_scatter/ring: sums and averages against the serial reference") {
  reduce_scatter_with(chorus::algo::ring);
}
TEST_CASE("reduce_scatter/recursive_halving: sums and averages against the serial reference") {
  reduce_scatter_with(chorus::algo::recursive_halving);
}
TEST_CASE("reduce_scatter/shared_memory: sums and averages against the serial reference") {
  reduce_scatter_with(chorus::algo::shared_memory);
}

namespace {

// Every rank's `count` values of case `seed`, in rank order.
template <class T>
std::vector<T> concatenated(int n, std::size_t count, std::uint64_t seed) {
  std::vector<T> all;
  for (int r = 0; r < n; ++r) {
    const auto theirs = inputs<T>(r, count, seed, flavour::general);
    all.insert(all.end(), theirs.begin(), theirs.end());
  }
  return all;
}

template <class T>
std::vector<T> block_of(const std::vector<T>& all, std::size_t count, int rank) {
  const auto first = all.begin() + static_cast<std::ptrdiff_t>(count * static_cast<std::size_t>(rank));
  return {first, first + static_cast<std::ptrdiff_t>(count)};
}

// The in-place forms NCCL defines and FSDP2 calls: this rank's input is
// its block of the allgather's output, its reduce_scatter output its block
// of the input; the root's block at gather and scatter likewise.
void in_place_forms(communicator& comm, std::size_t count, tally& results) {
  const int n = comm.size(), me = comm.rank();
  const std::size_t own = count * static_cast<std::size_t>(me);
  const std::vector<float> everyone = concatenated<float>(n, count, 41);
  for (const auto algorithm :
       {chorus::algo::automatic, chorus::algo::ring, chorus::algo::recursive_doubling, chorus::algo::shared_memory}) {
    std::vector<float> all(count * static_cast<std::size_t>(n), -7.0f);
    const auto mine = inputs<float>(me, count, 41, flavour::general);
    std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(own));
    chorus::allgather(comm, std::span<const float>(all).subspan(own, count), std::span(all), algorithm);
    results.record("allgather in place, " + std::string(chorus::to_string(algorithm)), count_different(all, everyone));
  }
  std::vector<float> coded(count * static_cast<std::size_t>(n), -7.0f);
  const auto mine = inputs<float>(me, count, 41, flavour::general);
  std::copy(mine.begin(), mine.end(), coded.begin() + static_cast<std::ptrdiff_t>(own));
  chorus::allgather(comm, std::span<const float>(coded).subspan(own, count), std::span(coded), chorus::codec::bf16{});
  results.record("compressed allgather in place", count_different(coded, everyone));  // multiples of 1/8: exact in bf16

  const std::size_t total = count * static_cast<std::size_t>(n);
  const auto summed = reference<double>(all_ranks(n), total, 43, flavour::general, chorus::op::sum{});
  for (const auto algorithm :
       {chorus::algo::automatic, chorus::algo::ring, chorus::algo::recursive_halving, chorus::algo::shared_memory}) {
    std::vector<double> data = inputs<double>(me, total, 43, flavour::general);
    chorus::reduce_scatter(comm, std::span<const double>(data), std::span(data).subspan(own, count), chorus::op::sum{},
                           algorithm);
    results.record("reduce_scatter in place, " + std::string(chorus::to_string(algorithm)),
                   count_different(block_of(std::vector<double>(data), count, me), block_of(summed, count, me)));
  }

  const std::vector<std::int64_t> spread = concatenated<std::int64_t>(n, count, 47);
  for (const int root : {0, n - 1, n / 2}) {
    std::vector<std::int64_t> gathered(me == root ? total : count, -1);
    const auto block = inputs<std::int64_t>(me, count, 47, flavour::general);
    const std::size_t at = me == root ? count * static_cast<std::size_t>(root) : 0;
    std::copy(block.begin(), block.end(), gathered.begin() + static_cast<std::ptrdiff_t>(at));
    chorus::gather(comm, std::span<const std::int64_t>(gathered).subspan(at, count), std::span(gathered), root);
    if (me == root) results.record("gather in place at the root", count_different(gathered, spread));

    std::vector<std::int64_t> source = me == root ? spread : std::vector<std::int64_t>(count, -1);
    std::span<std::int64_t> piece = std::span(source).subspan(at, count);
    chorus::scatter(comm, std::span<const std::int64_t>(source), piece, root);
    results.record("scatter in place at the root",
                   count_different(std::vector<std::int64_t>(piece.begin(), piece.end()), block_of(spread, count, me)));
  }
}

}  // namespace

TEST_CASE("in-place forms: a rank's block of the other buffer, at 1-5 ranks and odd counts; other overlaps refused") {
  tally results;
  run_for_each_rank_count(
      [&](communicator& comm) {
        for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{4099}})
          in_place_forms(comm, count, results);
        const int n = comm.size(), me = comm.rank();
        if (n < 2) return;
        // A block one element off its place is not the in-place form.
        const std::size_t whole = 5 * static_cast<std::size_t>(n);
        std::vector<float> all(whole + 1);
        const std::size_t off = 5 * static_cast<std::size_t>(me) + 1;
        expect_error(
            [&] { chorus::allgather(comm, std::span<const float>(all).subspan(off, 5), std::span(all).first(whole)); },
            chorus::errc::invalid_argument, "the input starts at element " + std::to_string(off - 1));
        expect_error(
            [&] {
              chorus::reduce_scatter(comm, std::span<const float>(all).first(whole), std::span(all).subspan(off, 5));
            },
            chorus::errc::invalid_argument, "the output starts at element " + std::to_string(off - 1));
        expect_error(
            [&] { chorus::alltoall(comm, std::span<const float>(all).first(whole), std::span(all).subspan(1, whole)); },
            chorus::errc::invalid_argument, "overlap");
        chorus::allgather(comm, std::span(all).first(whole));  // nothing left half-done
      },
      5);
  results.report();
}

namespace {

// premul_sum of one floating type through allreduce (in place and out of
// place, every algorithm), reduce and reduce_scatter (in place too).
template <class T>
void premultiplied_sums(communicator& comm, std::size_t count, double factor, std::uint64_t seed, tally& results,
                        fingerprints& prints) {
  const int n = comm.size(), me = comm.rank();
  const chorus::op::premul_sum op{factor};
  const std::string type(chorus::to_string(chorus::dtype_of<T>));
  const std::string key = type + " count " + std::to_string(count) + " factor " + std::to_string(factor);
  const auto expected = premultiplied_reference<T>(all_ranks(n), count, seed, factor);
  const bool exact = factor == 0.375;
  const auto agrees = [&](const std::string& what, const std::vector<T>& got) {
    prints.add(what + " " + key + " n=" + std::to_string(n), me, fingerprint(got.data(), got.size() * sizeof(T)));
    if (exact) results.record(what + " " + key, count_different(got, expected));
  };
  for (const auto algorithm : {chorus::algo::automatic, chorus::algo::ring, chorus::algo::recursive_doubling,
                               chorus::algo::rabenseifner, chorus::algo::tree, chorus::algo::shared_memory}) {
    std::vector<T> data = inputs<T>(me, count, seed, flavour::general);
    chorus::allreduce(comm, std::span(data), op, algorithm);
    agrees("allreduce " + std::string(chorus::to_string(algorithm)), data);
  }
  const std::vector<T> input = inputs<T>(me, count, seed, flavour::general);
  std::vector<T> output(count);
  chorus::allreduce(comm, std::span(input), std::span(output), op);
  results.record("premul_sum leaves an out-of-place input as it was " + key,
                 count_different(input, inputs<T>(me, count, seed, flavour::general)));
  agrees("allreduce out of place", output);

  const int root = n / 2;
  std::vector<T> reduced(count, T(-1.0f));
  chorus::reduce(comm, std::span(input), std::span(reduced), root, op);
  if (me == root) agrees("reduce", reduced);

  const std::size_t own = count * static_cast<std::size_t>(me);
  const auto everyone = inputs<T>(me, count * static_cast<std::size_t>(n), seed + 1, flavour::general);
  const auto whole = premultiplied_reference<T>(all_ranks(n), count * static_cast<std::size_t>(n), seed + 1, factor);
  std::vector<T> part(count);
  chorus::reduce_scatter(comm, std::span(everyone), std::span(part), op);
  std::vector<T> chunked = everyone;
  chorus::reduce_scatter(comm, std::span<const T>(chunked), std::span(chunked).subspan(own, count), op);
  const std::vector<T> own_block(chunked.begin() + static_cast<std::ptrdiff_t>(own),
                                 chunked.begin() + static_cast<std::ptrdiff_t>(own + count));
  if (exact) {
    const std::vector<T> due(whole.begin() + static_cast<std::ptrdiff_t>(own),
                             whole.begin() + static_cast<std::ptrdiff_t>(own + count));
    results.record("reduce_scatter " + key, count_different(part, due));
    results.record("reduce_scatter in place " + key, count_different(own_block, due));
  } else {
    results.record("reduce_scatter in place, as out of place " + key, count_different(own_block, part));
  }
}

}  // namespace

TEST_CASE("premul_sum: each rank's input times the factor, then summed, against the serial reference, same bits") {
  tally results;
  fingerprints prints;
  run_for_each_rank_count(
      [&](communicator& comm) {
        std::uint64_t seed = 300;
        for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{40009}})
          for (const double factor : {0.375, 0.1}) {
            premultiplied_sums<float>(comm, count, factor, ++seed, results, prints);
            premultiplied_sums<double>(comm, count, factor, ++seed, results, prints);
            premultiplied_sums<chorus::half>(comm, count, factor, ++seed, results, prints);
            premultiplied_sums<chorus::bfloat16>(comm, count, factor, ++seed, results, prints);
          }
      },
      5);
  results.report();
  CHECK(prints.disagreements() == 0);
}

TEST_CASE("alltoall/pairwise: block j of rank i lands as block i of rank j") {
  tally results;
  for_each_rank_count_subcase([&](communicator& comm) {
    const int n = comm.size();
    for (const std::size_t count : counts_for(n, true)) {
      const std::size_t total = count * static_cast<std::size_t>(n);
      std::vector<std::uint16_t> send(total), receive(total, 0xffff);
      for (std::size_t i = 0; i < total; ++i) send[i] = static_cast<std::uint16_t>(comm.rank() * 1000 + i);
      const chorus::algorithm ran = chorus::alltoall(comm, std::span<const std::uint16_t>(send), std::span(receive));
      std::size_t wrong = ran == chorus::algorithm::pairwise ? 0 : 1;  // it reports what ran
      for (int from = 0; from < n; ++from)
        for (std::size_t i = 0; i < count; ++i)
          wrong += receive[from * count + i] != static_cast<std::uint16_t>(from * 1000 + comm.rank() * count + i);
      results.record("alltoall", wrong);
    }
    chorus::barrier(comm);
  });
  results.report();
}

namespace {

template <class T, class Op>
void rooted_and_scattered_reductions(communicator& comm, std::size_t count, Op op, std::uint64_t seed, tally& results) {
  const int n = comm.size();
  const std::string type(chorus::to_string(chorus::dtype_of<T>));
  const std::string name(chorus::op::name_of<Op>());
  const int root = n / 2;
  const auto input = inputs<T>(comm.rank(), count, seed, flavour::general);
  std::vector<T> reduced(count);
  chorus::reduce(comm, std::span(input), std::span(reduced), root, op);
  if (comm.rank() == root)
    results.record("reduce " + type + " " + name,
                   count_different(reduced, reference<T>(all_ranks(n), count, seed, flavour::general, op)));
  const std::size_t total = count * static_cast<std::size_t>(n);
  const auto everything = inputs<T>(comm.rank(), total, seed + 1, flavour::general);
  const auto full = reference<T>(all_ranks(n), total, seed + 1, flavour::general, op);
  const std::vector<T> expected(full.begin() + static_cast<std::ptrdiff_t>(count * comm.rank()),
                                full.begin() + static_cast<std::ptrdiff_t>(count * (comm.rank() + 1)));
  for (const auto algorithm : {chorus::algo::ring, chorus::algo::recursive_halving, chorus::algo::shared_memory}) {
    std::vector<T> mine(count);
    chorus::reduce_scatter(comm, std::span(everything), std::span(mine), op, algorithm);
    results.record("reduce_scatter " + type + " " + name, count_different(mine, expected));
  }
}

template <class T>
void every_op_of_interest(communicator& comm, std::size_t count, std::uint64_t seed, tally& results) {
  rooted_and_scattered_reductions<T>(comm, count, chorus::op::sum{}, seed, results);
  rooted_and_scattered_reductions<T>(comm, count, chorus::op::max{}, seed + 2, results);
}

}  // namespace

TEST_CASE("reduce and reduce_scatter: every element type with sum and max") {
  tally results;
  run_for_each_rank_count([&](communicator& comm) {
    for (const std::size_t count :
         {std::size_t{0}, std::size_t{1}, static_cast<std::size_t>(comm.size() + 1), std::size_t{1031}}) {
      every_op_of_interest<std::int8_t>(comm, count, 61, results);
      every_op_of_interest<std::int16_t>(comm, count, 62, results);
      every_op_of_interest<std::int32_t>(comm, count, 63, results);
      every_op_of_interest<std::int64_t>(comm, count, 64, results);
      every_op_of_interest<std::uint8_t>(comm, count, 65, results);
      every_op_of_interest<std::uint32_t>(comm, count, 66, results);
      every_op_of_interest<std::uint64_t>(comm, count, 67, results);
      every_op_of_interest<float>(comm, count, 68, results);
      every_op_of_interest<double>(comm, count, 69, results);
      every_op_of_interest<chorus::half>(comm, count, 70, results);
      every_op_of_interest<chorus::bfloat16>(comm, count, 71, results);
    }
  });
  results.report();
}

TEST_CASE("non-blocking collectives complete in any order, overlapping blocking ones") {
  tally results;
  run_for_each_rank_count([&](communicator& comm) {
    const int n = comm.size();
    auto a = inputs<float>(comm.rank(), 50001, 31, flavour::general);
    auto b = inputs<std::int32_t>(comm.rank(), 17, 32, flavour::general);
    auto c = comm.rank() == 0 ? inputs<double>(0, 1000, 33, flavour::general) : std::vector<double>(1000);
    const auto mine = inputs<std::int16_t>(comm.rank(), 5, 34, flavour::general);
    std::vector<std::int16_t> all(5 * static_cast<std::size_t>(n));
    auto first = chorus::iallreduce(comm, std::span(a));
    auto second = chorus::iallreduce(comm, std::span(b), chorus::op::max{}, chorus::algo::ring);
    auto third = chorus::ibroadcast(comm, std::span(c), 0);
    auto fourth = chorus::iallgather(comm, std::span(mine), std::span(all));
    auto d = inputs<float>(comm.rank(), 333, 35, flavour::general);
    chorus::allreduce(comm, std::span(d));  // blocking, on this thread, meanwhile
    fourth.wait();
    third.wait();
    while (!second.test()) std::this_thread::yield();
    first.wait();
    results.record("iallreduce a",
                   count_different(a, reference<float>(all_ranks(n), 50001, 31, flavour::general, chorus::op::sum{})));
    results.record("iallreduce b", count_different(b, reference<std::int32_t>(all_ranks(n), 17, 32, flavour::general,
                                                                              chorus::op::max{})));
    results.record("ibroadcast", count_different(c, inputs<double>(0, 1000, 33, flavour::general)));
    results.record("blocking meanwhile",
                   count_different(d, reference<float>(all_ranks(n), 333, 35, flavour::general, chorus::op::sum{})));
    std::vector<std::int16_t> expected;
    for (int r = 0; r < n; ++r) {
      const auto theirs = inputs<std::int16_t>(r, 5, 34, flavour::general);
      expected.insert(expected.end(), theirs.begin(), theirs.end());
    }
    results.record("iallgather", count_different(all, expected));
  });
  results.report();
}

TEST_CASE("collectives on sub-groups from split") {
  tally results;
  run_for_each_rank_count([&](communicator& world) {
    communicator group = world.split(world.rank() % 3, world.rank());
    std::vector<int> members;
    for (int r = world.rank() % 3; r < world.size(); r += 3) members.push_back(r);
    REQUIRE(group.size() == static_cast<int>(members.size()));
    for (const auto algorithm : allreduce_algorithms) {
      auto data = inputs<std::int64_t>(world.rank(), 1000, 41, flavour::general);
      chorus::allreduce(group, std::span(data), chorus::op::sum{}, algorithm);
      results.record(
          "group allreduce",
          count_different(data, reference<std::int64_t>(members, 1000, 41, flavour::general, chorus::op::sum{})));
    }
    auto whole = inputs<std::int64_t>(world.rank(), 10, 43, flavour::general);
    chorus::allreduce(world, std::span(whole));  // the world still works alongside
    results.record("world allreduce",
                   count_different(whole, reference<std::int64_t>(all_ranks(world.size()), 10, 43, flavour::general,
                                                                  chorus::op::sum{})));
  });
  results.report();
}

TEST_CASE("fusion packs many small tensors into few allreduces") {
  chorus::run_threads(
      3,
      [](communicator& comm) {
        std::vector<std::vector<float>> layers;
        for (int t = 0; t < 40; ++t)
          layers.push_back(inputs<float>(comm.rank(), 100 + 37 * t, 50 + t, flavour::general));
        layers.push_back(inputs<float>(comm.rank(), 70000, 99, flavour::general));  // bigger than a bucket
        std::vector<std::span<float>> views(layers.begin(), layers.end());
        const std::size_t calls = chorus::fused_allreduce(comm, views, chorus::op::sum{}, 64u << 10);
        CHECK(calls < 10);
        CHECK(calls >= 3);
        for (int t = 0; t < 40; ++t)
          CHECK(count_different(layers[t], reference<float>(all_ranks(3), 100 + 37 * t, 50 + t, flavour::general,
                                                            chorus::op::sum{})) == 0);
        CHECK(count_different(layers[40],
                              reference<float>(all_ranks(3), 70000, 99, flavour::general, chorus::op::sum{})) == 0);
      },
      quick());
}

TEST_CASE("CHORUS_CHECK=1: disagreeing calls are mismatch errors naming the ranks") {
  ::setenv("CHORUS_CHECK", "1", 1);
  chorus::run_threads(
      4,
      [](communicator& comm) {
        std::vector<float> data(comm.rank() == 2 ? 12 : 10);
        expect_error([&] { chorus::allreduce(comm, std::span(data)); }, chorus::errc::mismatch,
                     "ranks 0, 1, 3 call allreduce(count 10, float32, sum, host memory); rank 2 calls allreduce(count "
                     "12, float32, sum, host memory)");
        std::vector<float> other(10);
        if (comm.rank() == 3)
          expect_error([&] { chorus::broadcast(comm, std::span(other), 0); }, chorus::errc::mismatch,
                       "rank 3 calls broadcast");
        else
          expect_error([&] { chorus::allreduce(comm, std::span(other)); }, chorus::errc::mismatch,
                       "rank 3 calls broadcast");
        chorus::allreduce(comm, std::span(other));  // agreement again: it works
      },
      quick());
  ::unsetenv("CHORUS_CHECK");
}

TEST_CASE("invalid arguments are invalid_argument errors") {
  chorus::run_threads(
      3,
      [](communicator& comm) {
        std::vector<float> data(10), small(5);
        expect_error([&] { chorus::broadcast(comm, std::span(data), 3); }, chorus::errc::invalid_argument,
                     "root 3 is not in [0, 3)");
        expect_error([&] { chorus::reduce(comm, std::span(data), -1); }, chorus::errc::invalid_argument, "root -1");
        expect_error([&] { chorus::allreduce(comm, std::span<const float>(data), std::span(small)); },
                     chorus::errc::invalid_argument, "output holds 5 elements, needs 10");
        expect_error(
            [&] { chorus::allreduce(comm, std::span<const float>(data).first(8), std::span(data).subspan(2)); },
            chorus::errc::invalid_argument, "overlap");
        expect_error([&] { chorus::reduce_scatter(comm, std::span<const float>(data), std::span(small)); },
                     chorus::errc::invalid_argument, "do not split into 3 equal blocks");
        expect_error([&] { chorus::allgather(comm, std::span(data), chorus::algo::chain); },
                     chorus::errc::invalid_argument, "10 elements do not split");
        std::vector<float> nine(9);
        expect_error([&] { chorus::allgather(comm, std::span(nine), chorus::algo::chain); },
                     chorus::errc::invalid_argument, "names chain, which is not an algorithm of allgather");
        expect_error([&] { chorus::allreduce(comm, std::span(data), chorus::algo::chain); },
                     chorus::errc::invalid_argument, "not an algorithm of allreduce");
        chorus::allreduce(comm, std::span(data));  // nothing was left half-done
      },
      quick());
}

TEST_CASE("selection: the defaults, CHORUS_ALLREDUCE_ALGO and the caller, in that order of precedence") {
  CHECK(chorus::choose_allreduce(4, 8).chosen == chorus::algo::shared_memory_small);  // one host
  CHECK(chorus::choose_allreduce(4, 64u << 20).chosen != chorus::algo::shared_memory_small);
  CHECK(chorus::choose_allreduce(4, 8).reason == "default allreduce@2-:0-16K:shared_memory_small");
  ::setenv("CHORUS_ALLREDUCE_ALGO", "tree", 1);
  CHECK(chorus::choose_allreduce(4, 8).chosen == chorus::algo::tree);
  CHECK(std::string(chorus::choose_allreduce(4, 8).reason) == "CHORUS_ALLREDUCE_ALGO");
  CHECK(chorus::choose_allreduce(4, 8, chorus::algo::ring).chosen == chorus::algo::ring);
  ::setenv("CHORUS_ALLREDUCE_ALGO", "rd", 1);  // an alias: the list answers with the name
  CHECK(chorus::choose_allreduce(4, 1u << 20).chosen == chorus::algo::recursive_doubling);
  ::setenv("CHORUS_ALLREDUCE_ALGO", "fastest", 1);
  expect_error([] { chorus::choose_allreduce(4, 8); }, chorus::errc::invalid_argument,
               "CHORUS_ALLREDUCE_ALGO names fastest, which is not an algorithm of allreduce (it has "
               "recursive_doubling, rabenseifner, ring, tree, shared_memory, shared_memory_small, hierarchical)");
  ::unsetenv("CHORUS_ALLREDUCE_ALGO");
}

// A name that parses but that the collective does not offer fails the
// collective's first call, on every rank alike, before anything is sent.
TEST_CASE("selection: a rule or setting naming an algorithm a collective lacks fails its first call on every rank") {
  const std::tuple<const char*, const char*, const char*> cases[] = {
      {"CHORUS_ALLREDUCE_ALGO", "chain", "CHORUS_ALLREDUCE_ALGO names chain"},
      {"CHORUS_TUNE", "allreduce:1M-:fastest",
       "CHORUS_TUNE allreduce:1M-:fastest names fastest, which is not an algorithm of allreduce"}};
  for (const auto& [variable, value, message] : cases) {
    const std::string name = variable;  // not the structured binding: CAPTURE's lambda takes it (clang 14)
    CAPTURE(name);
    ::setenv(variable, value, 1);
    tally results;
    chorus::run_threads(
        3,
        [&, message = std::string(message)](communicator& comm) {
          std::vector<float> data(5, 1.0f);  // a size no rule matches: every rule is checked anyway
          expect_error([&] { chorus::allreduce(comm, data); }, chorus::errc::invalid_argument, message);
          expect_error([&] { chorus::allreduce(comm, data); }, chorus::errc::invalid_argument, message);
          results.record("untouched", static_cast<std::size_t>(std::count(data.begin(), data.end(), 1.0f) != 5));
        },
        quick());
    ::unsetenv(variable);
    results.report();
  }
  expect_error([] { chorus::check_names(chorus::parse_tuning("allgather:0-:rabenseifner"), {}); },
               chorus::errc::invalid_argument,
               "rabenseifner, which is not an algorithm of allgather (it has recursive_doubling, ring, shared_memory, "
               "hierarchical)");
  CHECK_NOTHROW(chorus::check_names(chorus::parse_tuning("allgather:0-:rd;broadcast:0-:shm"), chorus::algo::tree));
}

// Every phase of an algorithm reserves its wire-tag steps in an order all
// ranks follow, also the ranks that sit out a folded group: at 37 ranks
// (folded into 32: five halving rounds, five folded pairs) every algorithm
// of every collective must still pair each send with its receive.
TEST_CASE("wire-tag phases: every algorithm at 37 ranks, and a call that needs more steps than the tag holds") {
  tally results;
  fingerprints prints;
  chorus::run_threads(
      37,
      [&](communicator& comm) {
        const int n = comm.size();
        for (const auto algorithm : allreduce_algorithms)
          for (const std::size_t count : {std::size_t{1}, std::size_t(n + 2), std::size_t{70001}})
            allreduce_case<float>(comm, algorithm, count, chorus::op::sum{}, flavour::general, 40 + count, results,
                                  prints);

        const std::size_t count = 5;
        const std::size_t total = count * static_cast<std::size_t>(n);
        const auto full = reference<float>(all_ranks(n), total, 43, flavour::general, chorus::op::sum{});
        for (const auto algorithm : {chorus::algo::ring, chorus::algo::recursive_halving}) {
          const auto input = inputs<float>(comm.rank(), total, 43, flavour::general);
          std::vector<float> output(count);
          chorus::reduce_scatter(comm, std::span(input), std::span(output), chorus::op::sum{}, algorithm);
          const std::vector<float> expected(full.begin() + static_cast<std::ptrdiff_t>(count * comm.rank()),
                                            full.begin() + static_cast<std::ptrdiff_t>(count * (comm.rank() + 1)));
          results.record("reduce_scatter " + std::string(chorus::to_string(algorithm)),
                         count_different(output, expected));
        }
        std::vector<float> expected_all;
        for (int r = 0; r < n; ++r) {
          const auto theirs = inputs<float>(r, count, 44, flavour::general);
          expected_all.insert(expected_all.end(), theirs.begin(), theirs.end());
        }
        for (const auto algorithm : {chorus::algo::ring, chorus::algo::recursive_doubling}) {
          const auto mine = inputs<float>(comm.rank(), count, 44, flavour::general);
          std::vector<float> all(total, -5.0f);
          chorus::allgather(comm, std::span(mine), std::span(all), algorithm);
          results.record("allgather " + std::string(chorus::to_string(algorithm)), count_different(all, expected_all));
        }
        for (const auto algorithm : {chorus::algo::tree, chorus::algo::chain}) {
          std::vector<std::int32_t> data(1000, comm.rank() == 3 ? 7 : -1);
          chorus::broadcast(comm, std::span(data), 3, algorithm);
          results.record(
              "broadcast " + std::string(chorus::to_string(algorithm)),
              static_cast<std::size_t>(std::count_if(data.begin(), data.end(), [](std::int32_t v) { return v != 7; })));
        }
        std::vector<std::int64_t> values(3, comm.rank() + 1), reduced(3);
        chorus::reduce(comm, std::span<const std::int64_t>(values), std::span(reduced), n - 1, chorus::op::sum{});
        if (comm.rank() == n - 1)
          results.record("reduce",
                         static_cast<std::size_t>(std::count_if(reduced.begin(), reduced.end(), [&](std::int64_t v) {
                           return v != std::int64_t{n} * (n + 1) / 2;
                         })));

        // The 19-bit step field holds 524288 steps per call; asking for more is
        // an error naming the phase, on every rank, before anything is sent.
        chorus::collective::exchange ex(comm, "phase test");
        const auto most = ex.phase(524000, "most");
        expect_error(
            [&] { ex.phase(289, "too many"); }, chorus::errc::invalid_argument,
            "phase 'too many' needs 289 wire-tag steps, but only 288 of 524288 are left in this call (37 ranks)");
        const auto rest = ex.phase(288, "rest");
        CHECK(most(523999) + 1 == rest(0));
        CHECK(rest(287) == chorus::tag::max_step);
        expect_error([&] { (void)rest(288); }, chorus::errc::invalid_argument, "step 288 is outside phase 'rest'");
        expect_error([&] { ex.phase(1, "one more"); }, chorus::errc::invalid_argument, "only 0 of 524288 are left");
      },
      quick());
  results.report();
  CHECK(prints.disagreements() == 0);
}

namespace {

// The measured table as it was written before the defaults were rules,
// independently: sizes up to a bound inclusive, shared memory on one host
// and the hierarchical forms on hosts of several ranks, both from 16 KiB,
// and allreduce's one-slot shared memory below 16 KiB on one host.
// The defaults' rules start at the first measured size (a power of two)
// the next algorithm won, so the two agree at every measured size.
chorus::algorithm measured_table(std::string_view collective, const chorus::workload& w) {
  using chorus::algorithm;
  const bool has_host_forms = collective == "allreduce" || collective == "allgather" ||
                              collective == "reduce_scatter" || collective == "broadcast";
  const bool one_host = w.ranks >= 2 && w.hosts == 1 && w.host_memory && !w.between_hosts;
  if (collective == "allreduce" && one_host && w.bytes < (16u << 10)) return algorithm::shared_memory_small;
  if (has_host_forms && w.ranks >= 2 && w.bytes >= (16u << 10) && w.host_memory && !w.between_hosts) {
    if (w.hosts == 1) return algorithm::shared_memory;
    if (w.ranks_per_host > 1) return algorithm::hierarchical;
  }
  if (collective == "allreduce") {
    if (w.ranks <= 1 || w.bytes <= (w.ranks == 2 ? 4u << 10 : 8u << 10)) return algorithm::recursive_doubling;
    if (w.ranks == 2) return algorithm::ring;
    return w.bytes < (2u << 20) ? algorithm::rabenseifner : algorithm::ring;
  }
  if (collective == "allgather") return w.bytes <= (64u << 10) ? algorithm::recursive_doubling : algorithm::ring;
  if (collective == "reduce_scatter") return w.bytes <= (64u << 10) ? algorithm::recursive_halving : algorithm::ring;
  if (collective == "broadcast") return w.ranks <= 2 || w.bytes <= (256u << 10) ? algorithm::tree : algorithm::chain;
  if (collective == "compressed_allreduce") {
    if (w.sparse) return algorithm::sparse;
    return w.ranks >= 2 && w.reencodes_well && w.bytes >= (1u << 20) ? algorithm::ring : algorithm::encode_once;
  }
  if (collective == "reduce") return algorithm::tree;
  return collective == "alltoall" ? algorithm::pairwise : algorithm::linear;
}

}  // namespace

TEST_CASE("selection registry: every collective's list, its defaults as the measured table, its costs") {
  const auto& entries = chorus::registry();
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const chorus::collective_entry& entry = *entries[i];
    CAPTURE(std::string(entry.name));
    CHECK(entry.name == chorus::selecting_collectives[i]);
    for (const chorus::tuning_rule& rule : entry.default_rules.rules) CHECK(entry.find(rule.chosen) != nullptr);
    for (const chorus::algorithm_facts& algorithm : entry.algorithms) CHECK(!algorithm.cost.empty());
    std::size_t wrong = 0, unreasoned = 0, infeasible = 0, bad_costs = 0;
    for (const int ranks : {1, 2, 3, 4, 8, 37})
      for (const std::size_t bytes :
           {std::size_t{0}, std::size_t{1}, std::size_t{4095}, std::size_t{4096}, std::size_t{8192}, std::size_t{16384},
            std::size_t{65536}, std::size_t{262144}, std::size_t{1} << 20, std::size_t{2} << 20, std::size_t{64} << 20})
        for (const int hosts : {1, 2, 3})
          for (const int flags : {0, 1, 2, 3, 4}) {
            const int on = std::min(hosts, ranks);
            const chorus::workload w{.ranks = ranks,
                                     .bytes = bytes,
                                     .reencodes_well = (flags & 1) != 0,
                                     .sparse = flags == 2,
                                     .hosts = on,
                                     .ranks_per_host = ranks % on == 0 ? ranks / on : 0,
                                     .host_memory = flags != 4};
            const chorus::choice made = chorus::choose(entry, w, chorus::algorithm::automatic, {}, {});
            wrong += made.chosen != measured_table(entry.name, w);
            unreasoned += !made.reason.starts_with("default " + std::string(entry.name));
            infeasible += !entry.offered(made.chosen, "").feasible(w);
            for (const chorus::algorithm_facts& algorithm : entry.algorithms) {
              const double seconds = algorithm.seconds(w, chorus::machine{});
              bad_costs += !(seconds >= 0 && seconds < 1e6);
            }
          }
    CHECK(wrong == 0);
    CHECK(unreasoned == 0);
    CHECK(infeasible == 0);
    CHECK(bad_costs == 0);
  }
  expect_error([] { chorus::registered("barrier"); }, chorus::errc::invalid_argument, "'barrier' is not a collective");
}

// Where no rule matches (no defaults here), the cost model takes the
// suitable algorithm whose formula is least, and says so.
TEST_CASE("selection: the cost model decides where no rule matches, among the algorithms that suit the call") {
  const chorus::collective_entry& allreduce = chorus::registered("allreduce");
  const chorus::collective_entry bare{allreduce.name, allreduce.algorithms, {}};
  for (const int ranks : {2, 3, 8})
    for (const std::size_t bytes : {std::size_t{8}, std::size_t{1} << 16, std::size_t{64} << 20})
      for (const bool between_hosts : {false, true}) {
        const chorus::workload w{.ranks = ranks,
                                 .bytes = bytes,
                                 .hosts = between_hosts ? ranks : 1,
                                 .ranks_per_host = between_hosts ? 1 : ranks,
                                 .between_hosts = between_hosts};
        const chorus::choice made = chorus::choose(bare, w, chorus::algorithm::automatic, {}, {});
        CAPTURE(ranks);
        CAPTURE(bytes);
        CHECK(made.reason.starts_with("cost model, "));
        double least = 1e300;
        chorus::algorithm cheapest;
        for (const chorus::algorithm_facts& algorithm : allreduce.algorithms) {
          if (!algorithm.feasible(w) || !algorithm.suits(w)) continue;
          const double seconds = algorithm.seconds(w, chorus::machine{});
          if (seconds < least) least = seconds, cheapest = algorithm.id;
        }
        CHECK(made.chosen == cheapest);
        if (between_hosts) CHECK(made.chosen != chorus::algo::shared_memory);
      }
  // The ring's bandwidth term is optimal: for a large buffer over the network it beats the tree.
  const chorus::workload large{.ranks = 8, .bytes = std::size_t{64} << 20, .hosts = 8, .ranks_per_host = 1};
  CHECK(allreduce.find(chorus::algo::ring)->seconds(large, {}) <
        allreduce.find(chorus::algo::tree)->seconds(large, {}));
}

// A program's tuner edits the cost table before the least is taken (as
// NCCL's tuner plugin does); while one is installed the defaults' rules,
// measured on another machine, are passed over.
TEST_CASE("selection: a cost tuner edits the table, takes algorithms out, and the defaults return without it") {
  const chorus::collective_entry& allreduce = chorus::registered("allreduce");
  const chorus::workload w{.ranks = 5, .bytes = std::size_t{1} << 20, .hosts = 5, .ranks_per_host = 1};
  const chorus::choice before = chorus::choose(allreduce, w, chorus::algorithm::automatic, {}, {});
  CHECK(!before.reason.starts_with("cost model"));  // a default rule
  std::vector<std::string> seen;
  CHECK(!chorus::install_cost_tuner(
      [&](std::string_view collective, const chorus::workload& asked, std::span<chorus::algorithm_cost> table) {
        seen.emplace_back(collective);
        CHECK(asked.bytes == w.bytes);
        for (chorus::algorithm_cost& row : table) {
          // The model's own figure on the call's path, before the tuner edits it.
          CHECK(row.seconds == doctest::Approx(allreduce.find(row.id)->seconds(asked, chorus::machine{})));
          row.seconds = row.id == chorus::algo::tree ? 0.0 : 1.0;
        }
      }));
  const chorus::choice tuned = chorus::choose(allreduce, w, chorus::algorithm::automatic, {}, {});
  CHECK(tuned.chosen == chorus::algo::tree);
  CHECK(tuned.reason == "cost model (tuned), 0 us");
  CHECK(seen == std::vector<std::string>{"allreduce"});
  // The caller's choice still wins over the model.
  CHECK(chorus::choose(allreduce, w, chorus::algo::ring, {}, {}).chosen == chorus::algo::ring);
  // A tuner that takes every algorithm out is an error that says so.
  const chorus::cost_tuner previous = chorus::install_cost_tuner(
      [](std::string_view, const chorus::workload&, std::span<chorus::algorithm_cost> table) {
        for (chorus::algorithm_cost& row : table) row.seconds = std::numeric_limits<double>::infinity();
      });
  CHECK(previous);
  expect_error([&] { chorus::choose(allreduce, w, chorus::algorithm::automatic, {}, {}); },
               chorus::errc::invalid_argument, "the cost tuner took out every one");
  chorus::install_cost_tuner({});
  const chorus::choice after = chorus::choose(allreduce, w, chorus::algorithm::automatic, {}, {});
  CHECK(after.chosen == before.chosen);
  CHECK(after.reason == before.reason);
}

// A calibrated machine prices each path with its own figures: the choice
// is the least on the call's path under that machine's constants, and the
// reason gives the model's seconds.
TEST_CASE("selection: the cost model prices the call's path with the machine it is given") {
  const chorus::collective_entry& allreduce = chorus::registered("allreduce");
  chorus::machine_model slow_messages;  // a millisecond a message between hosts, bytes almost free
  slow_messages.between_hosts = {1e-3, 1e-15};
  const auto cheapest = [&](const chorus::workload& w, const chorus::machine& constants) {
    std::pair<double, chorus::algorithm> best{1e300, {}};
    for (const chorus::algorithm_facts& row : allreduce.algorithms)
      if (row.chosen_by_default_for(w) && row.seconds(w, constants) < best.first)
        best = {row.seconds(w, constants), row.id};
    return best;
  };
  const auto in_reason = [](double seconds) {
    char text[32];
    std::snprintf(text, sizeof text, "%.3g", seconds * 1e6);
    return std::string(text) + " us";
  };
  const chorus::workload across{.ranks = 8, .bytes = std::size_t{64} << 20, .hosts = 8, .ranks_per_host = 1};
  const auto [least, best] = cheapest(across, slow_messages.on_path(true));
  const chorus::choice made = chorus::detail::by_cost_model(allreduce, across, slow_messages, nullptr, true);
  CHECK(made.chosen == best);
  CHECK(made.reason == "cost model (CHORUS_MACHINE), " + in_reason(least));
  CHECK(least != doctest::Approx(cheapest(across, chorus::machine{}).first));
  // Within one host the model's within_host path (the defaults here) prices the call.
  const chorus::workload inside{.ranks = 8, .bytes = std::size_t{64} << 20, .hosts = 1, .ranks_per_host = 8};
  const auto [least_inside, best_inside] = cheapest(inside, chorus::machine{});
  const chorus::choice here = chorus::detail::by_cost_model(allreduce, inside, slow_messages, nullptr, true);
  CHECK(here.chosen == best_inside);
  CHECK(here.reason == "cost model (CHORUS_MACHINE), " + in_reason(least_inside));
}

TEST_CASE("selection: the caller, then CHORUS_TUNE, then CHORUS_ALLREDUCE_ALGO, then the defaults") {
  using chorus::algorithm;
  const chorus::tuning tune = chorus::parse_tuning("allreduce@4:0-1K:tree;allgather:0-:ring");
  const auto pick = [&](std::string_view collective, int ranks, std::size_t bytes, algorithm forced,
                        algorithm configured) {
    return chorus::choose(collective, {ranks, bytes}, forced, tune, configured);
  };
  CHECK(pick("allreduce", 4, 8, algorithm::automatic, algorithm::automatic).chosen == algorithm::tree);
  CHECK(pick("allreduce", 4, 8, algorithm::automatic, algorithm::automatic).reason ==
        "CHORUS_TUNE allreduce@4:0-1K:tree");
  CHECK(pick("allreduce", 4, 8, algorithm::ring, algorithm::automatic).chosen == algorithm::ring);
  CHECK(pick("allreduce", 4, 8, algorithm::ring, algorithm::automatic).reason == "caller");
  CHECK(pick("allreduce", 4, 8, algorithm::automatic, algorithm::rabenseifner).chosen == algorithm::tree);
  CHECK(pick("allreduce", 3, 8, algorithm::automatic, algorithm::rabenseifner).reason == "CHORUS_ALLREDUCE_ALGO");
  CHECK(pick("allreduce", 3, 8, algorithm::automatic, algorithm::automatic).chosen ==
        algorithm::shared_memory_small);  // one host
  CHECK(pick("allreduce", 3, 8, algorithm::automatic, algorithm::automatic).reason ==
        "default allreduce@2-:0-16K:shared_memory_small");
  const chorus::workload across{.ranks = 3, .bytes = 8, .hosts = 3, .ranks_per_host = 1};
  CHECK(chorus::choose("allreduce", across, algorithm::automatic, tune, algorithm::automatic).reason ==
        "default allreduce@3-:0-16K:recursive_doubling");
  CHECK(pick("allgather", 3, 8, algorithm::automatic, algorithm::rabenseifner).chosen == algorithm::ring);
  CHECK(pick("reduce_scatter", 3, 8, algorithm::automatic, algorithm::rabenseifner).chosen ==
        algorithm::recursive_halving);
  expect_error([&] { pick("broadcast", 3, 8, algorithm::ring, algorithm::automatic); }, chorus::errc::invalid_argument,
               "the caller names ring, which is not an algorithm of broadcast (it has tree, chain, shared_memory, "
               "hierarchical)");

  ::setenv("CHORUS_TUNE", "broadcast:0-:chain", 1);
  CHECK(chorus::choose("broadcast", {2, 8}).chosen == algorithm::chain);
  ::setenv("CHORUS_TUNE", "broadcast:0-:ring", 1);
  expect_error([] { chorus::choose("broadcast", {2, 8}); }, chorus::errc::invalid_argument, "CHORUS_TUNE");
  ::unsetenv("CHORUS_TUNE");
  CHECK(chorus::choose("broadcast", {2, 8}).chosen == algorithm::tree);
}

// A communicator tuned in code runs what the rules say, for every
// collective (the result checked against the serial reference), and
// returns it: allgather and allreduce against their tables' choices.
TEST_CASE("CHORUS_TUNE in a job: every collective runs and returns the tuned algorithm, with correct results") {
  tally results;
  for (const int ranks : {3, 5}) {
    chorus::options options = quick();
    options.tune =
        "allgather:0-:recursive_doubling;reduce_scatter:0-:ring;broadcast:0-:chain;allreduce@3-:0-:tree;"
        "compressed_allreduce:0-:ring";
    chorus::run_threads(
        ranks,
        [&](communicator& comm) {
          // 273 KiB per rank: the tables would pick ring, ring and rabenseifner.
          four_collectives_checked(comm, 70001, 7, 1, 91,
                                   {chorus::algo::tree, chorus::algo::rd, chorus::algo::ring, chorus::algo::chain},
                                   results);

          const int n = comm.size();
          std::vector<float> small(100, static_cast<float>(comm.rank() + 1));
          const auto scheme = chorus::allreduce(comm, std::span(small), chorus::op::sum{}, chorus::codec::fp16{});
          const float sum = static_cast<float>(n * (n + 1) / 2);
          std::size_t wrong = scheme != chorus::algo::ring;
          for (float value : small) wrong += value != sum;
          results.record("compressed allreduce tuned to the ring", wrong);
        },
        options);
  }
  results.report();
}
