// chorus-perf calibrate (calibrate.cpp): the machine file for CHORUS_MACHINE.
#pragma once

#include <chorus/comm/ucx_communicator.hpp>

namespace perf {

// argv[1] is "calibrate"; its options follow. Throws std::invalid_argument
// for bad options.
int calibrate(chorus::communicator& comm, int argc, char** argv);

}  // namespace perf
