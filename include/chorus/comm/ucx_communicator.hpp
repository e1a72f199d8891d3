// chorus::communicator: the communicator over UCX, the one init() returns
// and every collective takes. Include this (or chorus/collective.hpp) in a
// file that receives a communicator; init() itself is in chorus/init.hpp.
#pragma once

#include <chorus/comm/communicator.hpp>
#include <chorus/transport/network.hpp>

namespace chorus {

using communicator = basic_communicator<network::transport>;

}  // namespace chorus
