// Run under chorus-run -n 3 with a short CHORUS_TIMEOUT: rank 2 sends one
// message to each survivor and dies in the middle of the protocol (no
// cleanup, exit code 0 so the launcher lets the survivors run on). Each
// survivor must get a chorus::error naming peer 2 within the timeout.
//
//   peer_exit            ranks 0 and 1 wait for a second message from rank 2:
//                        peer_failure or timeout
//   peer_exit pending    ranks 0 and 1 keep a receive from rank 2 pending and
//                        wait on each other, both alive: peer_failure naming
//                        rank 2 well before the timeout (an exchange with a
//                        dead peer can never complete), never a timeout
//   peer_exit standing   ranks 0 and 1 keep a *standing* receive from rank 2
//                        pending (a scheme's receive for a message that may
//                        never come) and exchange with each other: that
//                        succeeds, since rank 2 may simply have finished;
//                        only a test of the standing receive itself fails,
//                        with a peer_failure naming rank 2
//   peer_exit startup    rank 2 joins the job's store and dies before it
//                        publishes its address: init() on ranks 0 and 1 is
//                        a peer_failure naming rank 2 at once (the store saw
//                        its connection close), not a wait for the timeout
#include <chorus/bootstrap/store_open.hpp>
#include <chorus/chorus.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string_view>
#include <thread>

namespace {

// Rank 2 does what init() does up to joining the store, then dies; the
// others' init() must fail naming it, long before the timeout.
int die_during_startup() {
  const chorus::bootstrap::launch_info info = chorus::bootstrap::discover();
  if (info.rank == 2) {
    chorus::store::client_options joining;
    joining.host = info.store->host;
    joining.port = info.store->port;
    joining.token = info.token;
    joining.rank = info.rank;
    std::unique_ptr<chorus::store::connection> store = chorus::store::join_store(std::move(joining));
    store->join_as(info.rank);
    ::_exit(0);  // its connection closes without leave()
  }
  const auto start = std::chrono::steady_clock::now();
  try {
    chorus::communicator comm = chorus::init();
    std::printf("rank %d: init() succeeded without rank 2\n", info.rank);
    return 1;
  } catch (const chorus::error& failure) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const bool ok = failure.category() == chorus::errc::peer_failure && failure.peer() == 2 && waited < 10.0;
    std::printf("rank %d: %s after %.3f s: %s\n", info.rank, ok ? "ok" : "WRONG", waited, failure.what());
    return ok ? 0 : 1;
  }
}

// Rank 2 leaves; a standing receive from it does not fail the survivors'
// exchange, and testing it names rank 2.
int outlive_standing_receive(chorus::communicator& comm) {
  std::array<int, 3> values{};
  if (comm.rank() == 2) {
    comm.send(std::span(values), 0);
    comm.send(std::span(values), 1);
    ::_exit(0);
  }
  std::array<int, 3> never{};
  auto standing = comm.irecv(std::span(never), 2, 9, chorus::receive_kind::standing);
  comm.recv(std::span(values), 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // rank 2 is gone by now
  const int other = 1 - comm.rank();
  std::array<int, 3> mine{comm.rank(), 7, 7}, theirs{};
  try {
    auto sent = comm.isend(std::span<const int>(mine), other, 5);
    comm.recv(std::span(theirs), other, 5);
    comm.wait(sent);
  } catch (const chorus::error& failure) {
    std::printf("rank %d: WRONG: the exchange with a live peer failed: %s\n", comm.rank(), failure.what());
    return 1;
  }
  try {
    comm.progress_until([&] { return comm.test(standing); }, "standing receive");
    std::printf("rank %d: WRONG: the standing receive from rank 2 completed\n", comm.rank());
    return 1;
  } catch (const chorus::error& failure) {
    const bool ok = failure.category() == chorus::errc::peer_failure && failure.peer() == 2 && theirs[0] == other;
    std::printf("rank %d: %s: exchanged with rank %d, then the standing receive failed: %s\n", comm.rank(),
                ok ? "ok" : "WRONG", other, failure.what());
    std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the other survivor is not done yet
    return ok ? 0 : 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "";
  if (mode == "startup") return die_during_startup();
  const bool pending = mode == "pending";
  chorus::communicator comm = chorus::init();
  if (mode == "standing") return outlive_standing_receive(comm);
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
    if (pending) {
      std::array<int, 3> never{};
      auto from_dead = comm.irecv(std::span(never), 2, 9);
      comm.recv(std::span(values), 1 - comm.rank(), 5);  // the other survivor sends nothing either
    } else {
      comm.recv(std::span(values), 2);
    }
    std::printf("rank %d: received a message that was never sent\n", comm.rank());
    return 1;
  } catch (const chorus::error& failure) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double timeout = std::chrono::duration<double>(comm.timeout()).count();
    const double limit = pending ? timeout / 2 : timeout + 2.0;  // a sanitizer build is 10x slower
    const bool expected =
        failure.category() == chorus::errc::peer_failure || (!pending && failure.category() == chorus::errc::timeout);
    const bool ok = expected && failure.peer() == 2 && waited <= limit;
    std::printf("rank %d: %s after %.2f s: %s\n", comm.rank(), ok ? "ok" : "WRONG", waited, failure.what());
    // Stay alive a moment: the other survivor must find rank 2 the only
    // failed peer, not see this rank leave first (also a correct error).
    if (pending) std::this_thread::sleep_for(std::chrono::seconds(1));
    return ok ? 0 : 1;
  }
}
