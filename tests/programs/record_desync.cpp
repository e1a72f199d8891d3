// Jobs that go wrong the ways the flight recorder's report must explain
// (tests/record_report runs them under chorus-run and reads the report):
//   skip      rank 2 skips the second of three allreduces, then waits for a
//             message nobody sends: the others wait in the third
//   mismatch  at the same call rank 2 broadcasts while the others allreduce
//             4 MiB of float
//   kill      rank 3 is SIGKILLed after two allreduces; the others go on
//             into a third
//   uncaught  rank 2 skips the third of five allreduces and stays alive,
//             waiting for a message nobody sends; nobody catches anything,
//             so each rank's error ends it through std::terminate
// Every rank that gets an error prints it and exits with 1 (uncaught: the
// runtime aborts it).
#include <chorus/chorus.hpp>

#include <csignal>
#include <cstdio>
#include <string_view>
#include <vector>

namespace {

// As a trainer fails: no handler anywhere, so no destructor runs either.
int without_a_handler() {
  chorus::communicator comm = chorus::init();
  std::vector<float> small(256, 1.0f);
  for (int call = 0; call < 5; ++call)
    if (!(comm.rank() == 2 && call == 2)) chorus::allreduce(comm, small);
  if (comm.rank() == 2) comm.recv(std::span(small), 0, 7);  // never sent
  comm.barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view mode = argc > 1 ? argv[1] : "skip";
  if (mode == "uncaught") return without_a_handler();
  try {
    chorus::communicator comm = chorus::init();
    std::vector<float> small(256, 1.0f);
    std::vector<float> large((4u << 20) / sizeof(float), 1.0f);
    if (mode == "skip") {
      for (int step = 0; step < 3; ++step)
        if (!(comm.rank() == 2 && step == 1)) chorus::allreduce(comm, small);
      if (comm.rank() == 2) comm.recv(std::span(small), 0, 7);  // never sent
    } else if (mode == "mismatch") {
      chorus::allreduce(comm, small);
      if (comm.rank() == 2)
        chorus::broadcast(comm, std::span(large), 0);
      else
        chorus::allreduce(comm, large);
    } else if (mode == "kill") {
      chorus::allreduce(comm, small);
      chorus::allreduce(comm, small);
      if (comm.rank() == 3) std::raise(SIGKILL);
      chorus::allreduce(comm, small);
    } else {
      std::fprintf(stderr, "record_desync: unknown mode %.*s\n", static_cast<int>(mode.size()), mode.data());
      return 2;
    }
    comm.barrier();
    return 0;
  } catch (const chorus::error& failure) {
    std::fprintf(stderr, "%s\n", failure.what());
    return 1;
  }
}
