// Builds against chorus like a user would, then runs a one-rank job over UCX.
#include <chorus/chorus.hpp>

#include <cstdio>

int main() {
  chorus::communicator comm = chorus::init();
  std::array<float, 3> out{1.5f, -2.0f, 65504.0f}, in{};
  auto receive = comm.irecv(std::span(in), 0);
  comm.send(std::span(out), 0);
  comm.wait(receive);
  comm.barrier();
  const bool ok = in == out && chorus::half(in[2]).bits() == 0x7bff && comm.size() == 1;
  std::printf("consumer: %s\n", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
