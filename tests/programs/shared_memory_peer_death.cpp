// A rank killed during shared-memory allreduces.
//
//   chorus-run -n 3 --keep-going shared_memory_peer_death
//
// Every rank runs 1 MiB allreduces through shared memory; rank 2 SIGKILLs
// itself before its 6th, while the others are inside theirs, waiting on its
// flags. Each survivor must end that call with a chorus::error of category
// peer_failure (or timeout) within the communicator's timeout and a margin,
// and afterwards no segment of this job may be left in /dev/shm (the names
// are removed as soon as every rank has mapped them). Exit 0 when all holds.
#include <chorus/chorus.hpp>

#include <dirent.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

namespace {

constexpr int victim = 2;
constexpr int calls_before_death = 5;

// Names in /dev/shm that this job's ranks made (chorus_<pid>_...).
int segments_of(const std::vector<std::int64_t>& pids) {
  int found = 0;
  if (DIR* directory = ::opendir("/dev/shm")) {
    while (const dirent* entry = ::readdir(directory))
      for (const std::int64_t pid : pids)
        found += std::string(entry->d_name).rfind("chorus_" + std::to_string(pid) + "_", 0) == 0;
    ::closedir(directory);
  }
  return found;
}

}  // namespace

int main() {
  chorus::communicator comm = chorus::init();
  const std::int64_t own_pid = ::getpid();
  std::vector<std::int64_t> pids(static_cast<std::size_t>(comm.size()));
  chorus::allgather(comm, std::span(&own_pid, 1), std::span(pids));
  std::vector<float> data(1u << 18, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int call = 0; call < 1000; ++call) {
      if (comm.rank() == victim && call == calls_before_death) ::raise(SIGKILL);
      chorus::allreduce(comm, data, chorus::algo::shared_memory);
    }
    std::printf("FAIL: rank %d finished 1000 allreduces without its peer\n", comm.rank());
    return 1;
  } catch (const chorus::error& failure) {
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool expected =
        failure.category() == chorus::errc::peer_failure || failure.category() == chorus::errc::timeout;
    const double limit = static_cast<double>(comm.timeout().count()) / 1000 + 5;
    const int left = segments_of(pids);
    std::printf("rank %d: %s after %.2f s (limit %.0f s); chorus segments in /dev/shm: %d\n", comm.rank(),
                failure.what(), seconds, limit, left);
    return expected && seconds < limit && left == 0 ? 0 : 1;
  }
}
