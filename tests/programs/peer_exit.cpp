// Run under chorus-run -n 3 with a short CHORUS_TIMEOUT: rank 2 sends one
// message to each survivor and dies in the middle of the protocol (no
// cleanup, exit code 0 so the launcher lets the survivors run on). Ranks 0
// and 1 wait for a second message that never comes; each must get a
// chorus::error of category peer_failure or timeout within the timeout.
#include <chorus/chorus.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>

int main() {
  chorus::communicator comm = chorus::init();
  const std::array<int, 3> first{1, 2, 3};
  if (comm.rank() == 2) {
    comm.send(std::span(first), 0);
    comm.send(std::span(first), 1);
    ::_exit(0);
  }
  std::array<int, 3> values{};
  comm.recv(std::span(values), 2);
  const auto start = std::chrono::steady_clock::now();
  try {
    comm.recv(std::span(values), 2);
    std::printf("rank %d: received a message from a dead peer\n", comm.rank());
    return 1;
  } catch (const chorus::error& failure) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double limit = std::chrono::duration<double>(comm.timeout()).count() + 2.0;
    const bool expected = failure.category() == chorus::errc::peer_failure || failure.category() == chorus::errc::timeout;
    std::printf("rank %d: %s after %.2f s: %s\n", comm.rank(), expected && waited <= limit ? "ok" : "WRONG", waited,
                failure.what());
    return expected && failure.peer() == 2 && waited <= limit ? 0 : 1;
  }
}
