// Transport helpers that need no network: a peer's process identity and
// liveness (how a dead peer on this host is noticed), and the sweep of
// shared-memory segments UCX left behind.
#include <chorus/transport/peer_process.hpp>
#include <chorus/transport/ucx_shm_orphans.hpp>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

using chorus::transport::process_identity;

TEST_CASE("process identity: encodes, decodes, and names this process") {
  const process_identity self = process_identity::self();
  CHECK(self.pid == ::getpid());
  CHECK(self.start > 0);
  CHECK(self.host.find('/') != std::string::npos);  // boot id / net ns / pid ns
  const auto decoded = process_identity::decode(self.encode());
  REQUIRE(decoded);
  CHECK(decoded->host == self.host);
  CHECK(decoded->pid == self.pid);
  CHECK(decoded->start == self.start);
  CHECK_FALSE(process_identity::decode("no numbers here"));
  CHECK_FALSE(process_identity::decode("host 12"));
  CHECK_FALSE(process_identity::decode("host x 12"));
  CHECK(chorus::transport::process_alive(self));
}

TEST_CASE("process liveness: a zombie, a reaped process and a recycled pid are dead") {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::pause();
    ::_exit(0);
  }
  process_identity watched;
  watched.pid = child;
  for (int tries = 0; tries < 100 && watched.start == 0; ++tries)
    watched.start = process_identity::start_ticks(child).value_or(0);
  CHECK(chorus::transport::process_alive(watched));
  process_identity recycled = watched;
  recycled.start += 1;  // same pid, another start time: not the process we were told about
  CHECK_FALSE(chorus::transport::process_alive(recycled));
  ::kill(child, SIGKILL);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (chorus::transport::process_alive(watched) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK_FALSE(chorus::transport::process_alive(watched));  // a zombie until reaped
  ::waitpid(child, nullptr, 0);
  CHECK_FALSE(chorus::transport::process_alive(watched));
}

TEST_CASE("UCX segments nobody maps or holds open are removed; others stay") {
  const std::string orphan = "/dev/shm/ucx_shm_posix_test_orphan_" + std::to_string(::getpid());
  const std::string held = "/dev/shm/ucx_shm_posix_test_held_" + std::to_string(::getpid());
  const std::string young = "/dev/shm/ucx_shm_posix_test_young_" + std::to_string(::getpid());
  const std::string other = "/dev/shm/not_ucx_" + std::to_string(::getpid());
  const auto make = [](const std::string& path, bool old) {
    std::FILE* file = std::fopen(path.c_str(), "w");
    REQUIRE(file != nullptr);
    std::fclose(file);
    if (old) {
      const timespec times[2] = {{::time(nullptr) - 60, 0}, {::time(nullptr) - 60, 0}};
      ::utimensat(AT_FDCWD, path.c_str(), times, 0);
    }
  };
  make(orphan, true);
  make(held, true);
  make(young, false);
  make(other, true);
  const int holder = ::open(held.c_str(), O_RDONLY);
  REQUIRE(holder >= 0);
  CHECK(chorus::transport::remove_orphaned_ucx_segments() >= 1);
  CHECK(::access(orphan.c_str(), F_OK) != 0);
  CHECK(::access(held.c_str(), F_OK) == 0);   // open in this process
  CHECK(::access(young.c_str(), F_OK) == 0);  // perhaps being created right now
  CHECK(::access(other.c_str(), F_OK) == 0);  // not UCX's
  ::close(holder);
  for (const std::string& path : {held, young, other}) ::unlink(path.c_str());
}
