// All collectives: front doors, algorithms, non-blocking variants, fusion.
#pragma once

#include <chorus/collective/allgather.hpp>
#include <chorus/collective/allreduce.hpp>
#include <chorus/collective/alltoall.hpp>
#include <chorus/collective/barrier.hpp>
#include <chorus/collective/broadcast.hpp>
#include <chorus/collective/fusion.hpp>
#include <chorus/collective/gather.hpp>
#include <chorus/collective/nonblocking.hpp>
#include <chorus/collective/reduce.hpp>
#include <chorus/collective/reduce_scatter.hpp>
#include <chorus/collective/scatter.hpp>
