// One route for every front door, whatever memory its buffers are in. A
// front door checks its arguments and chooses its algorithm, then hands
// run_where its buffers and its one body, written once against an exchange
// and its local computation (local_compute.hpp):
//
//   host memory                    body(exchange, host_compute)
//   memory the router takes on     body(network_exchange, routed_compute): the
//     the direct path              transport moves the buffers where they
//                                  are, the computation runs there (device kernels)
//   any other memory               run_where returns false: the front door
//                                  calls itself over host copies (through_host)
//
// The body makes the call's CHORUS_CHECK and CHORUS_DEBUG lines itself, so
// they happen once, on whichever path runs it, in the same order on every
// rank: a rank on the host path and one on the direct path meet in the same
// messages. `Direct` false keeps the body from being compiled for the
// direct path (half and bfloat16 reduce in a wider accumulator, which only
// the host computation holds): such calls are staged, and the report says why.
#pragma once

#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <initializer_list>
#include <string>
#include <string_view>

namespace chorus::collective {

// Whether a body over T, reduced by `op` (empty: only bytes move), can run
// on the direct path: the device computation reduces each type in itself.
template <class T>
inline constexpr bool reduces_in_itself = std::is_same_v<accumulator_t<T>, T>;

// Runs body(x, steps) where `buffers` live and returns true, or returns
// false where the call must be staged. `router`: routed(...) of the call's
// spans (null: host memory). `direct_allowed`: false where the chosen
// algorithm moves host memory itself (shared memory, hierarchical).
template <bool Direct = true, class Communicator, class Body>
bool run_where(Communicator& comm, memory_router* router, std::string_view collective,
               std::initializer_list<routed_buffer> buffers, dtype type, std::string_view op, bool direct_allowed,
               Body&& body) {
  if (router == nullptr) {
    exchange ex(comm, collective);
    body(ex, host_compute{});
    return true;
  }
  if constexpr (!Direct) {
    std::size_t bytes = 0;
    for (const routed_buffer& buffer : buffers) bytes += buffer.bytes;
    report_path(comm, collective, bytes, staged_because("reductions over " + std::string(to_string(type))));
    return false;
  } else {
    if (!direct_allowed) return false;
    return run_direct(*router, comm, collective, buffers, type, op, [&](local_arithmetic& where) {
      exchange ex(comm, collective);
      network_exchange on_network(ex, where);
      body(on_network, routed_compute(where));
    });
  }
}

}  // namespace chorus::collective
