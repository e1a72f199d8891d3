// Run under chorus-run -n 3 with a short CHORUS_TIMEOUT, argument gosgd or
// easgd_async: rank 2 trains a few steps and dies without any cleanup (exit
// code 0, so the launcher lets the others run on). The survivors train on
// and finish(); each must end with a chorus::error of category peer_failure
// or timeout, within the timeout and a margin, never hang.
#include <chorus/chorus.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace avg = chorus::averaging;

template <class Scheme>
int survive(chorus::communicator& comm, Scheme& scheme) {
  const auto start = std::chrono::steady_clock::now();
  try {
    for (int step = 0; step < 40; ++step)
      scheme.step([] { std::this_thread::sleep_for(std::chrono::milliseconds(2)); }, [] {});
    scheme.finish();
    std::printf("rank %d: finished without noticing the dead peer\n", comm.rank());
    return 1;
  } catch (const chorus::error& failure) {
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double limit = 3 * std::chrono::duration<double>(comm.timeout()).count() + 5.0;
    const bool expected = failure.category() == chorus::errc::peer_failure || failure.category() == chorus::errc::timeout;
    std::printf("rank %d: %s after %.2f s: %s\n", comm.rank(), expected && waited <= limit ? "ok" : "WRONG", waited,
                failure.what());
    return expected && waited <= limit ? 0 : 1;
  }
}

template <class Scheme>
int run(chorus::communicator& comm, Scheme& scheme) {
  if (comm.rank() == 2) {
    for (int step = 0; step < 5; ++step) scheme.step([] {}, [] {});
    std::fflush(stdout);
    ::_exit(0);
  }
  return survive(comm, scheme);
}

int main(int argc, char** argv) {
  const std::string which = argc > 1 ? argv[1] : "gosgd";
  chorus::communicator comm = chorus::init();
  std::vector<float> model(50000, static_cast<float>(comm.rank()));  // large enough for the rendezvous protocol
  const avg::parameters view{std::span<float>(model)};
  if (which == "gosgd") {
    avg::gosgd scheme(comm, view, {.push_probability = 1.0});
    return run(comm, scheme);
  }
  avg::easgd_async scheme(comm, view, {.alpha = 0.1, .tau = 1, .server = 0});
  return run(comm, scheme);
}
