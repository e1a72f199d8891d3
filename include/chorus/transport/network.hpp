// chorus::network: the transport a job of processes runs on between ranks
// and hosts, named once. The communicator, the world's set-up (connect.hpp)
// and the everything-header take it from here, so nothing above transport/
// names the UCX headers, and a second network transport (libfabric, say)
// slots in here: a `Transport` and `OneSided` (transport.hpp,
// one_sided.hpp) with a config, a peer's contact and an environment step.
#pragma once

#include <chorus/transport/ucx_transport.hpp>

namespace chorus::network {

using transport = ucx::ucx_transport;
using config = ucx::config;              // rank, size, progress mode, ranks it may ever reach
using peer_contact = ucx::peer_contact;  // what the store holds to reach a peer
using ucx::prepare_environment;          // settings read before the context is made

}  // namespace chorus::network
