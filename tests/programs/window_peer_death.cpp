// A rank SIGKILLed while it writes into its neighbours' windows.
//
//   chorus-run -n 4 --keep-going window_peer_death [raise|continue]
//
// Rank 2 puts 1 M-float tensors (every element equal to the entry's p) to
// everyone in a loop; a thread of its own SIGKILLs it after a random few
// milliseconds, so it dies in the middle of an entry more often than not.
// The survivors read their slots all along: no read may ever mix two
// entries (torn). raise: each survivor's operations end with a peer_failure
// (or timeout) error naming a dead rank (the victim, or a survivor that saw
// it die and left first), within the timeout. continue: the
// window drops it (drop_dead_peers), the survivors go on putting to each
// other, quiesce and free the window among themselves. Exit 0 when all holds.
#include <chorus/chorus.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

constexpr int victim = 2;

}  // namespace

int main(int argc, char** argv) {
  const bool keep_going = argc > 1 && std::string(argv[1]) == "continue";
  chorus::communicator comm = chorus::init();
  const std::size_t size = 1u << 20;
  std::vector<float> x(size, 1.0f);
  chorus::window win(comm, x, {.drop_dead_peers = keep_going});
  comm.barrier();
  if (comm.rank() == victim) {
    std::thread([] {
      std::mt19937 random(static_cast<unsigned>(::getpid()));
      std::this_thread::sleep_for(std::chrono::milliseconds(20 + random() % 40));
      ::raise(SIGKILL);
    }).detach();
    for (int round = 2;; ++round) {
      std::fill(x.begin(), x.end(), static_cast<float>(round));
      win.set_p(round);
      win.put(x);
    }
  }
  std::size_t torn = 0, reads = 0;
  const auto start = std::chrono::steady_clock::now();
  const auto read_all = [&] {
    win.collect([&](int, std::span<const float> value, double p) {
      ++reads;
      for (float v : value) torn += v != static_cast<float>(p) && !(p == 0.0 && v == 0.0f);
    });
  };
  int status = 0;
  if (!keep_going) {
    try {
      for (;;) {
        read_all();
        win.put(x);  // to everyone: the victim too, which is how a survivor notices
        if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) {
          std::printf("rank %d: FAIL: no error 60 s after the victim's death\n", comm.rank());
          return 1;
        }
      }
    } catch (const chorus::error& failure) {
      // The victim, or a survivor that has already seen the victim die and
      // left (each lingers a second first, so that is rare): either way a
      // clear error naming a rank that is gone.
      const bool expected =
          failure.category() == chorus::errc::peer_failure || failure.category() == chorus::errc::timeout;
      std::printf("rank %d: %s: %s\n", comm.rank(), expected ? "ok" : "FAIL", failure.what());
      status = expected && failure.peer() >= 0 ? 0 : 1;
      std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  } else {
    while (!win.lost(victim)) {
      read_all();
      win.put(x);
      if (std::chrono::steady_clock::now() - start > std::chrono::seconds(60)) {
        std::printf("rank %d: FAIL: the victim was not dropped within 60 s\n", comm.rank());
        return 1;
      }
    }
    for (int round = 0; round < 20; ++round) {
      read_all();
      win.put(x);
    }
    win.quiesce();
    read_all();
    win.free();
    std::printf("rank %d: ok: went on without rank %d\n", comm.rank(), victim);
  }
  std::printf("rank %d: %zu reads, %zu torn elements\n", comm.rank(), reads, torn);
  return torn == 0 ? status : 1;
}
