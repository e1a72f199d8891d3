// The README's first program: an allreduce, a broadcast and local SGD.
#include <chorus/chorus.hpp>

#include <cstdio>
#include <vector>

int main() {
  chorus::communicator comm = chorus::init();  // rank, size, peers: from PMIx or the environment
  std::vector<float> grads(1 << 20, float(comm.rank()));
  const chorus::algorithm ran = chorus::allreduce(comm, grads, chorus::op::avg{});  // chosen by size and ranks
  std::vector<float> weights(1000, float(comm.rank()));
  chorus::broadcast(comm, std::span(weights), /*root=*/0);

  chorus::averaging::local_sgd scheme(comm, std::span(weights), {.period = 8});  // or dpsgd, easgd, gosgd, ...
  for (int step = 0; step < 100; ++step) {
    scheme.step([] { /* compute gradients */ }, [&] { /* the optimiser's step on weights */ });
  }
  scheme.finish();  // weights: the average over the ranks
  std::printf("rank %d of %d: the allreduce ran %s\n", comm.rank(), comm.size(),
              std::string(chorus::to_string(ran)).c_str());
}
