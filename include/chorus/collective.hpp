// All collectives: front doors, algorithms, non-blocking variants, fusion,
// and chorus::communicator. What a file that runs collectives on a
// communicator it is given includes: no store, no Boost.Asio.
#pragma once

#include <chorus/comm/ucx_communicator.hpp>

#include <chorus/collective/allgather.hpp>
#include <chorus/collective/allreduce.hpp>
#include <chorus/collective/alltoall.hpp>
#include <chorus/collective/barrier.hpp>
#include <chorus/collective/broadcast.hpp>
#include <chorus/collective/fusion.hpp>
#include <chorus/collective/gather.hpp>
#include <chorus/collective/monitored_barrier.hpp>
#include <chorus/collective/nonblocking.hpp>
#include <chorus/collective/reduce.hpp>
#include <chorus/collective/reduce_scatter.hpp>
#include <chorus/collective/scatter.hpp>
