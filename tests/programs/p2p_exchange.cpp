// Run under chorus-run: every pair exchanges odd-sized messages, then the
// ranks split into two groups and do it again inside each. Exit code 0 only
// if every byte arrived where it belonged.
#include "../support.hpp"

#include <cstdio>

int main() {
  try {
    chorus::communicator world = chorus::init();
    std::size_t wrong = chorus_test::all_pairs_exchange(world);
    world.barrier();
    chorus::communicator half = world.split(world.rank() % 2, world.rank());
    wrong += chorus_test::all_pairs_exchange(half);
    half.barrier();
    world.barrier();
    std::printf("rank %d of %d: %zu wrong\n", world.rank(), world.size(), wrong);
    return wrong == 0 ? 0 : 1;
  } catch (const chorus::error& failure) {
    std::fprintf(stderr, "%s\n", failure.what());
    return 1;
  }
}
