// How a front door takes the direct path (route/memory_router.hpp) for
// buffers that are not host memory, and says which path it took.
//
//   if (run_direct(router, comm, "allgather", {view}, dtype_of<T>, "", [&](local_arithmetic& where) {
//         exchange ex(comm, "allgather");
//         network_exchange on_network(ex, where);   // collective/machinery/local_compute.hpp
//         allgather_by_ring(on_network, all, block);
//       }))
//     return algorithm::ring;
//   ... staged ...
//
// Every rank must send the same messages whichever path it took, so a front
// door takes the direct path only for the algorithm the registry chose, and
// the body does what the host path does in the same order (the argument
// check, then the exchange).
#pragma once

#include <chorus/core/element_type.hpp>
#include <chorus/core/log.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/memory_router.hpp>

#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace chorus {

// The debug line for a call whose buffers are not host memory, and the
// path its flight-record entry names.
template <class Communicator>
void report_path(const Communicator& comm, std::string_view collective, std::size_t bytes, std::string_view why,
                 record::path where = record::path::staged) {
  record::recorded_call::moved(where);
  if (log::debug_enabled())
    log::debug(comm.transport().rank(),
               std::string(collective) + " of " + std::to_string(bytes) + " B not in host memory: " + std::string(why));
}

// Where the transport moves `data` on the direct path (the fake device of
// the tests hands it another mapping of the same memory).
template <class U>
std::span<U> on_network(const local_arithmetic& where, std::span<U> data) {
  if (data.data() == nullptr) return data;
  return {static_cast<U*>(where.network_address(const_cast<std::remove_const_t<U>*>(data.data()))), data.size()};
}

// The reason a call the direct path does not cover is staged.
inline std::string staged_because(std::string_view what) {
  return "staged (the direct path does not run " + std::string(what) + ")";
}

// What `comm`'s transport says of the memory it would be handed.
template <class Communicator>
network_memory network_of(Communicator& comm) {
  auto& transport = comm.transport();
  return {transport.memory_kinds(),
          [&transport](const void* data, std::size_t bytes) { return transport.registered_kind(data, bytes); }};
}

namespace detail {

// run_direct's loop: ask(view) says whether the router takes each buffer.
template <class Communicator, class Ask, class Body>
bool run_direct_if(memory_router& router, Communicator& comm, std::string_view collective,
                   std::initializer_list<routed_buffer> views, Ask&& ask, Body&& body) {
  path_report path;
  std::size_t bytes = 0;
  const routed_buffer* first = nullptr;
  for (const routed_buffer& view : views) {
    if (view.bytes == 0) continue;  // nothing of it moves (a non-root's output)
    bytes += view.bytes;
    if (first == nullptr) first = &view;
    if (path.reason.empty() || path.direct) path = ask(view);
  }
  if (first == nullptr) return false;
  report_path(comm, collective, bytes, path.reason, path.direct ? record::path::direct : record::path::staged);
  if (!path.direct) return false;
  router.through_direct(*first, body, waiting_on(comm));
  return true;
}

}  // namespace detail

// Runs body(arithmetic) on the direct path if the router takes it for every
// buffer of `views` (op: the reduction's name; empty for a collective that
// only moves bytes), after reporting the path; false, having done nothing,
// where the call is to be staged.
template <class Communicator, class Body>
bool run_direct(memory_router& router, Communicator& comm, std::string_view collective,
                std::initializer_list<routed_buffer> views, dtype type, std::string_view op, Body&& body) {
  const network_memory network = network_of(comm);
  return detail::run_direct_if(
      router, comm, collective, views,
      [&](const routed_buffer& view) { return router.direct_path(view, type, op, network); }, body);
}

// The same for a compressed collective, whose float buffers are encoded
// with `codec`.
template <class Communicator, class Body>
bool run_direct(memory_router& router, Communicator& comm, std::string_view collective,
                std::initializer_list<routed_buffer> views, const codec_spec& codec, Body&& body) {
  const network_memory network = network_of(comm);
  return detail::run_direct_if(
      router, comm, collective, views,
      [&](const routed_buffer& view) { return router.direct_path(view, codec, network); }, body);
}

}  // namespace chorus
