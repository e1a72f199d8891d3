// chorus::alltoall: block j of rank i's input becomes block i of rank j's
// output.
//
// Algorithms: the list in collective/alltoall/alltoall_algorithms.hpp (the
// pairwise exchange, (n-1) alpha + (n-1)/n S beta).
//
//   chorus::alltoall(comm, input, output);   // both hold size() blocks of equal count
#pragma once

#include <chorus/collective/alltoall/alltoall_algorithms.hpp>
#include <chorus/collective/machinery/arguments.hpp>
#include <chorus/collective/machinery/check.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/front_door.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <span>
#include <string_view>

namespace chorus {

namespace collective {

// The block each rank sends to each; throws for sizes that do not split.
template <class Communicator, element T>
std::size_t alltoall_block(const Communicator& comm, std::span<const T> input, std::span<T> output) {
  const auto n = static_cast<std::size_t>(comm.size());
  if (input.size() % n != 0)
    throw error(errc::invalid_argument,
                std::to_string(input.size()) + " elements do not split into " + std::to_string(n) + " equal blocks",
                {comm.transport().rank(), -1, "alltoall"});
  check_output(input, output, input.size(), comm.transport().rank(), "alltoall", in_place_form::none());
  return input.size() / n;
}

}  // namespace collective

// One body for every memory kind (front_door.hpp): only bytes move, so the
// direct path needs no device kernels.
template <class Communicator, element T>
algorithm alltoall(Communicator& comm, std::span<const T> input, std::span<T> output) {
  const record::recorded_call recorded(record::recorder_of(comm), record::collective("alltoall", input));
  const std::size_t block = collective::alltoall_block(comm, input, output);
  memory_router* const router = routed(input, output);
  const choice made = choose(comm, entry_of<collective::alltoall_algorithms>(),
                             {.ranks = comm.size(), .bytes = input.size_bytes(), .host_memory = router == nullptr},
                             algorithm::automatic);
  if (collective::run_where(comm, router, "alltoall",
                            {{input.data(), input.size_bytes(), buffer_use::read},
                             {output.data(), input.size_bytes(), buffer_use::write}},
                            dtype_of<T>, "", true, [&](auto& x, const auto& compute) {
                              collective::check_if_enabled(
                                  comm, {"alltoall", block, dtype_of<T>, "", -1, call_memory(input, output)});
                              report(comm, "alltoall", input.size_bytes(), dtype_of<T>, made);
                              collective::alltoall_by(x, input, output, block, made.chosen, compute);
                            }))
    return made.chosen;
  return through_host(
      *router, comm,
      [&](std::span<const T> host_in, std::span<T> host_out) { return alltoall(comm, host_in, host_out); },
      staged(input, buffer_use::read), staged(output.first(input.size()), buffer_use::write));
}

}  // namespace chorus
