// Transport helpers that need no network: a peer's process identity and
// liveness (how a dead peer on this host is noticed), the sweep of
// shared-memory segments UCX left behind, and the pieces of the UCX
// transport that stand alone (defaults, errors, the waiting policy).
#include <chorus/transport/peer_process.hpp>
#include <chorus/transport/shared_segment.hpp>
#include <chorus/transport/ucx/defaults.hpp>
#include <chorus/transport/ucx/errors.hpp>
#include <chorus/transport/ucx/waiting.hpp>
#include <chorus/transport/ucx_shm_orphans.hpp>

#include <doctest/doctest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
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
  // Not a count: any chorus process starting meanwhile (a test running
  // beside this one) sweeps too and may remove the orphan first.
  chorus::transport::remove_orphaned_ucx_segments();
  CHECK(::access(orphan.c_str(), F_OK) != 0);
  CHECK(::access(held.c_str(), F_OK) == 0);   // open in this process
  CHECK(::access(young.c_str(), F_OK) == 0);  // perhaps being created right now
  CHECK(::access(other.c_str(), F_OK) == 0);  // not UCX's
  ::close(holder);
  for (const std::string& path : {held, young, other}) ::unlink(path.c_str());
}

TEST_CASE("in-process segments: found by name in this process only, shared, gone with the name") {
  namespace transport = chorus::transport;
  const std::string name = transport::shared_segment::name_for("in_process_" + std::to_string(::getpid()));
  transport::shared_segment made = transport::shared_segment::create_in_process(name, 8192);
  CHECK(::access(("/dev/shm" + name).c_str(), F_OK) != 0);  // no file: nothing another process could map
  CHECK(made.data()[4000] == std::byte{0});                 // zeroed, as a new file is
  made.data()[100] = std::byte{42};
  transport::shared_segment opened;
  CHECK_FALSE(opened.open_in_process(name, 1u << 20));  // not that large
  CHECK_FALSE(opened.open_in_process(name + "_other", 8192));
  CHECK_FALSE(opened.open(name, 8192));  // not in /dev/shm
  REQUIRE(opened.open_in_process(name, 8192));
  CHECK(opened.data() == made.data());  // one mapping for the process
  made.unlink();
  transport::shared_segment late;
  CHECK_FALSE(late.open_in_process(name, 8192));  // the name is gone
  {
    const transport::shared_segment creator = std::move(made);  // the creator ends; the mapping stays
  }
  opened.data()[200] = std::byte{7};
  CHECK(opened.data()[100] == std::byte{42});
  const transport::shared_segment again = transport::shared_segment::create_in_process(name, 4096);
  CHECK(again.data() != opened.data());  // the name is free for a new segment
}

TEST_CASE("chorus segments: made, mapped by name, unlinked; names of dead creators swept, live ones kept") {
  namespace transport = chorus::transport;
  const std::string name = transport::shared_segment::name_for("test_" + std::to_string(::getpid()));
  transport::shared_segment made = transport::shared_segment::create(name, 8192);
  made.data()[100] = std::byte{42};
  transport::shared_segment opened;
  CHECK_FALSE(opened.open(name, 1u << 20));  // not that large
  REQUIRE(opened.open(name, 8192));
  CHECK(opened.data()[100] == std::byte{42});  // the same memory
  made.unlink();
  CHECK(::access(("/dev/shm" + name).c_str(), F_OK) != 0);
  opened.data()[200] = std::byte{7};
  CHECK(made.data()[200] == std::byte{7});  // still shared after the name is gone

  // A name whose creator has exited (a reaped child's pid) is swept; one of a live process stays.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  ::waitpid(child, nullptr, 0);
  const std::string dead = "/dev/shm/chorus_" + std::to_string(child) + "_test_orphan";
  const std::string live = "/dev/shm" + transport::shared_segment::name_for("test_live");
  for (const std::string& path : {dead, live}) {
    std::FILE* file = std::fopen(path.c_str(), "w");
    REQUIRE(file != nullptr);
    std::fclose(file);
  }
  transport::remove_orphaned_segments();
  CHECK(::access(dead.c_str(), F_OK) != 0);
  CHECK(::access(live.c_str(), F_OK) == 0);
  ::unlink(live.c_str());
  ::unlink(dead.c_str());
}

TEST_CASE("UCX defaults: a UCX_TLS list is TCP-only when it names tcp and nothing but self besides") {
  CHECK(chorus::ucx::only_tcp("tcp"));
  CHECK(chorus::ucx::only_tcp("tcp,self"));
  CHECK(chorus::ucx::only_tcp("self,tcp"));
  CHECK_FALSE(chorus::ucx::only_tcp("self"));
  CHECK_FALSE(chorus::ucx::only_tcp("tcp,posix"));
  CHECK_FALSE(chorus::ucx::only_tcp("sm,tcp"));
  CHECK_FALSE(chorus::ucx::only_tcp(""));
}

TEST_CASE("UCX errors: a status's category, and a gone peer's failure whatever UCX said") {
  using chorus::errc;
  CHECK(chorus::ucx::category_of(UCS_ERR_MESSAGE_TRUNCATED, false) == errc::mismatch);
  CHECK(chorus::ucx::category_of(UCS_ERR_MESSAGE_TRUNCATED, true) == errc::mismatch);
  CHECK(chorus::ucx::category_of(UCS_ERR_CONNECTION_RESET, false) == errc::peer_failure);
  CHECK(chorus::ucx::category_of(UCS_ERR_ENDPOINT_TIMEOUT, false) == errc::peer_failure);
  CHECK(chorus::ucx::category_of(UCS_ERR_IO_ERROR, false) == errc::transport);
  CHECK(chorus::ucx::category_of(UCS_ERR_IO_ERROR, true) ==
        errc::peer_failure);  // "Shared memory error" from a dead peer
  CHECK(chorus::ucx::to_hex(0xabc) == "abc");
}

// The waiting policy with a fake network: polls until done, reads the clock
// (and watches the peers) only between idle polls, sleeps only in block
// mode and only after the idle grace, and gives up at the deadline.
TEST_CASE("UCX waiting policy: done, deadline, and when each mode sleeps") {
  using chorus::transport::progress_mode;
  using namespace std::chrono_literals;
  for (const auto mode : {progress_mode::spin, progress_mode::yield, progress_mode::block}) {
    CAPTURE(chorus::transport::to_string(mode));
    using chorus::transport::clock;
    int polls = 0, watches = 0, sleeps = 0;
    clock::time_point last_move = clock::now();
    const auto poll = [&] {  // something moves every third poll
      if (++polls % 3 != 0) return false;
      last_move = clock::now();
      return true;
    };
    const auto watch = [&](clock::time_point) { ++watches; };
    const auto sleep = [&](clock::duration remaining) {
      ++sleeps;
      CHECK(remaining > 0ms);
      // Only after the idle grace (a preempted test can really be idle that long).
      CHECK(clock::now() - last_move >= chorus::ucx::block_after_idle);
      std::this_thread::sleep_for(std::min<clock::duration>(remaining, 1ms));
    };
    CHECK(chorus::ucx::wait_until(mode, [&] { return polls >= 10; }, clock::now() + 5s, poll, watch, sleep));
    CHECK(polls >= 10);
    if (mode != progress_mode::block) CHECK(sleeps == 0);

    polls = watches = sleeps = 0;
    last_move = clock::now();
    const auto start = clock::now();
    CHECK_FALSE(chorus::ucx::wait_until(mode, [] { return false; }, start + 30ms, [] { return false; }, watch, sleep));
    const auto waited = chorus::transport::clock::now() - start;
    CHECK(waited >= 30ms);
    CHECK(waited < 2s);
    CHECK(watches > 0);
    if (mode == progress_mode::block)
      CHECK(sleeps > 0);
    else
      CHECK(sleeps == 0);
  }
}
