// Creating communicators: chorus::init() (from the environment a launcher
// sets), chorus::connect(launch_info), and chorus::run_threads (N ranks as
// threads of this process). Include it in the file that starts the job;
// files that only use a communicator include chorus/collective.hpp.
#pragma once

#include <chorus/comm/connect.hpp>
#include <chorus/comm/run_threads.hpp>
