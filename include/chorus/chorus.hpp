// chorus: collective communication and model averaging for data-parallel
// training. Include this header and link chorus::chorus.
#pragma once

#include <chorus/core/bfloat16.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/half.hpp>
#include <chorus/core/memory_kind.hpp>
#include <chorus/core/reduce_op.hpp>

#include <chorus/transport/transport.hpp>
#include <chorus/transport/ucx_transport.hpp>

#include <chorus/bootstrap/environment.hpp>
#include <chorus/bootstrap/store_client.hpp>
#include <chorus/bootstrap/store_server.hpp>
#include <chorus/bootstrap/token.hpp>

#include <chorus/comm/communicator.hpp>
#include <chorus/comm/connect.hpp>
#include <chorus/comm/run_threads.hpp>

#include <chorus/collective.hpp>
#include <chorus/codec.hpp>
#include <chorus/averaging.hpp>
