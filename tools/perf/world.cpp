// The harness's view of the ranks: a chorus communicator. The timings and
// #wrong travel by allreduce of one double or one count.
#include "collective.hpp"

#include <chorus/collective/allreduce/allreduce.hpp>

namespace perf {

void communicator_world::barrier() { comm_.barrier(); }

void communicator_world::sum_min_max(double& sum, double& low, double& high) {
  chorus::allreduce(comm_, std::span(&sum, 1), chorus::op::sum{});
  chorus::allreduce(comm_, std::span(&low, 1), chorus::op::min{});
  chorus::allreduce(comm_, std::span(&high, 1), chorus::op::max{});
}

void communicator_world::sum(std::uint64_t& count) {
  chorus::allreduce(comm_, std::span(&count, 1), chorus::op::sum{});
}

}  // namespace perf
