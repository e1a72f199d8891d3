// job_progress over a real store (run_threads hosts one): every rank's
// samples reach every other's count, a rank's view trails the job by at
// most what the others added since its last flush, and without a store it
// is this rank's samples times the ranks.
#include <chorus/averaging/job_progress.hpp>
#include <chorus/comm/run_threads.hpp>

#include <doctest/doctest.h>

#include <chrono>
#include <cstdint>

namespace avg = chorus::averaging;
using namespace std::chrono_literals;

TEST_CASE("job_progress: every rank's samples in every rank's count, flushed at once with no interval") {
  for (int ranks : {1, 3, 5}) {
    CAPTURE(ranks);
    chorus::run_threads(ranks, [&](chorus::communicator& comm) {
      avg::job_progress progress(comm, "train", 0ms);
      const auto r = static_cast<std::uint64_t>(comm.rank());
      // Rank r processes r + 1 batches of 7 + r samples: ranks of different speeds.
      for (std::uint64_t b = 0; b <= r; ++b) progress.add(7 + r);
      CHECK(progress.own() == (r + 1) * (7 + r));
      comm.barrier();
      progress.flush();  // adds nothing: reads the total
      std::uint64_t total = 0;
      for (std::uint64_t k = 0; k < static_cast<std::uint64_t>(ranks); ++k) total += (k + 1) * (7 + k);
      CHECK(progress.samples() == total);
    });
  }
}

TEST_CASE("job_progress: between flushes a rank counts its own samples, and the store hears of them at a flush") {
  chorus::run_threads(3, [](chorus::communicator& comm) {
    avg::job_progress progress(comm, "slow flushes", 3600s);  // no flush but the ones asked for
    progress.add(10);
    CHECK(progress.samples() == 10);  // its own only: nothing flushed yet
    comm.barrier();
    progress.flush();
    comm.barrier();  // every rank's 10 are in the store
    progress.add(5);
    // The total at its own flush (its 10 and those flushed before it), then its 5.
    CHECK(progress.samples() >= 10 + 5);
    CHECK(progress.samples() <= 30 + 5);
    progress.flush();
    comm.barrier();
    progress.flush();
    CHECK(progress.samples() == 45);
  });
}

TEST_CASE("job_progress without a store: this rank's samples times the ranks") {
  struct no_store {
    chorus::store::connection* store() const { return nullptr; }
    int size() const { return 4; }
  };
  avg::job_progress progress(no_store{}, "train");
  progress.add(3);
  progress.add(2);
  progress.flush();
  CHECK(progress.samples() == 20);
  CHECK(progress.own() == 5);
}
