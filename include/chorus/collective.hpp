// All collectives: front doors, algorithms, non-blocking variants, fusion,
// and chorus::communicator. What a file that runs collectives on a
// communicator it is given includes: no store, no Boost.Asio.
#pragma once

#include <chorus/comm/ucx_communicator.hpp>

#include <chorus/collective/allgather/allgather.hpp>
#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/collective/alltoall/alltoall.hpp>
#include <chorus/collective/barrier/barrier.hpp>
#include <chorus/collective/barrier/monitored_barrier.hpp>
#include <chorus/collective/broadcast/broadcast.hpp>
#include <chorus/collective/fusion.hpp>
#include <chorus/collective/gather/gather.hpp>
#include <chorus/collective/nonblocking.hpp>
#include <chorus/collective/reduce/reduce.hpp>
#include <chorus/collective/reduce_scatter/reduce_scatter.hpp>
#include <chorus/collective/scatter/scatter.hpp>
