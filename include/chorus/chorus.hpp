// chorus: collective communication and model averaging for data-parallel
// training. The everything-header; link chorus::runtime (or chorus::chorus
// for header-only use, where this file also compiles Boost.Asio).
// Narrower headers compile faster: chorus/collective.hpp for a file that
// runs collectives on a communicator it is given, chorus/init.hpp for the
// file that creates it.
#pragma once

#include <chorus/core/bfloat16.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/half.hpp>
#include <chorus/core/memory_kind.hpp>
#include <chorus/core/reduce_op.hpp>

#include <chorus/transport/transport.hpp>
#include <chorus/transport/network.hpp>

#include <chorus/bootstrap/environment.hpp>
#include <chorus/bootstrap/store_open.hpp>
#include <chorus/bootstrap/token.hpp>

#include <chorus/comm/ucx_communicator.hpp>
#include <chorus/init.hpp>

#include <chorus/averaging.hpp>
#include <chorus/codec.hpp>
#include <chorus/collective.hpp>
#include <chorus/registry.hpp>
