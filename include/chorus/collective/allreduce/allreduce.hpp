// chorus::allreduce: every rank ends with op over all ranks' data, with the
// same bits on every rank.
//
//   chorus::allreduce(comm, grads);                          // sum, in place
//   chorus::allreduce(comm, grads, chorus::op::avg{});
//   chorus::allreduce(comm, input, output, chorus::op::max{});
//   chorus::allreduce(comm, grads, chorus::algo::ring);      // force an algorithm
//   chorus::allreduce(comm, grads, chorus::op::premul_sum{0.25});  // sum of 0.25 x each rank's
//
// Returns the algorithm that ran (see collective/machinery/selection.hpp). half and
// bfloat16 are reduced in float and rounded once; integer avg truncates.
#pragma once

#include <chorus/collective/allreduce/allreduce_algorithms.hpp>
#include <chorus/collective/machinery/arguments.hpp>
#include <chorus/collective/machinery/check.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/front_door.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/premultiply.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <concepts>
#include <ranges>
#include <span>
#include <string>

namespace chorus {

template <class Op>
concept reduction_operator = !std::same_as<std::remove_cvref_t<Op>, algorithm>;

namespace collective {

// premul_sum on host memory (below).
template <class Communicator, element T>
algorithm allreduce_premultiplied(Communicator& comm, std::span<const T> input, std::span<T> output,
                                  const op::premul_sum& op, algorithm forced);

// The allreduce of `input` into `data` wherever they live (front_door.hpp),
// `router` being routed(data): one body, run on host memory with the
// host's algorithm (shared memory on one host), on the direct path where
// the router offers it (element types that are their own accumulator,
// built-in ops; never shared memory, which copies through the host), else
// staged: the ring part by part, so that the copies overlap the network,
// the others whole. The path is reported (CHORUS_DEBUG=1). `input` is
// `data` (in place) but on host memory, where the algorithms read it where
// it is.
template <class Communicator, element T, class Op>
algorithm allreduce_on(memory_router* router, Communicator& comm, std::span<const T> input, std::span<T> data, Op op,
                       algorithm forced) {
  if constexpr (op::premultiplies<Op>)
    if (router == nullptr) return allreduce_premultiplied(comm, input, data, op, forced);
  const record::recorded_call recorded(record::recorder_of(comm),
                                       record::collective("allreduce", data, op::name_of<Op>()));
  const choice made =
      choose(comm, entry_of<collective::allreduce_algorithms>(),
             {.ranks = comm.size(), .bytes = data.size_bytes(), .host_memory = router == nullptr}, forced);
  const auto check_and_report = [&] {
    check_if_enabled(comm, {"allreduce", data.size(), dtype_of<T>, op::name_of<Op>(), -1, call_memory(data)});
    report(comm, "allreduce", data.size_bytes(), dtype_of<T>, made);
  };
  if (router != nullptr && comm.size() == 1 && !op::premultiplies<Op>) {
    // op over one contribution is that contribution (avg divides by 1): the
    // buffer stays where it is, no copy through the host and back.
    check_and_report();
    report_path(comm, "allreduce", data.size_bytes(), "not moved (one rank: the result is the input)",
                record::path::not_moved);
    return made.chosen;
  }
  // Set where a staged ring runs this call over its host copy: the ring
  // reports each part it is done with; any other algorithm takes it whole.
  staging_hooks* const hooks = take_staging_hooks();
  // premul_sum on device memory is staged: the products are taken on the host.
  if (run_where < reduces_in_itself<T> &&
      !op::premultiplies < Op >> (comm, router, "allreduce", {{data.data(), data.size_bytes(), buffer_use::read_write}},
                                  dtype_of<T>, op::name_of<Op>(), !made.moves_host_memory,
                                  [&](auto& x, const auto& compute) {
                                    check_and_report();
                                    const bool whole = hooks != nullptr && made.chosen != algorithm::ring;
                                    if (whole) hooks->need(0, data.size_bytes());
                                    with_accumulator(input, data, [&](auto given, auto work) {
                                      allreduce_by(x, given, work, op, made.chosen, hooks, compute);
                                    });
                                    if (whole) hooks->done(0, data.size_bytes());
                                  }))
    return made.chosen;
  const auto on_host = [&](std::span<T> host) { return allreduce(comm, host, op, forced); };
  // Part by part only where the ring reduces the buffer itself (half and
  // bfloat16 reduce a float copy, whose parts are not the buffer's).
  if (reduces_in_itself<T> && !op::premultiplies<Op> &&
      choose(comm, entry_of<collective::allreduce_algorithms>(), {comm.size(), data.size_bytes()}, forced).chosen ==
          algorithm::ring)
    return through_host_in_parts(*router, comm, on_host, data);
  return through_host(*router, comm, on_host, staged(data, buffer_use::read_write));
}

// premul_sum on host memory (premultiply.hpp): the products into `output`,
// then their sum in place; one entry in the flight record, as premul_sum.
template <class Communicator, element T>
algorithm allreduce_premultiplied(Communicator& comm, std::span<const T> input, std::span<T> output,
                                  const op::premul_sum& op, algorithm forced) {
  static_assert(premultipliable<T>, "premul_sum reduces floating-point elements");
  const record::recorded_call recorded(record::recorder_of(comm),
                                       record::collective("allreduce", output, op::premul_sum::name));
  multiply_into(input, output, op.factor);
  return allreduce_on(nullptr, comm, std::span<const T>(output), output, op::sum{}, forced);
}

// The same through a given router (chorus::cuda::allreduce's staging).
template <class Communicator, element T, class Op>
algorithm allreduce_through(memory_router& router, Communicator& comm, std::span<T> data, Op op, algorithm forced) {
  return allreduce_on(&router, comm, std::span<const T>(data), data, op, forced);
}

}  // namespace collective

template <class Communicator, element T, reduction_operator Op = op::sum>
algorithm allreduce(Communicator& comm, std::span<T> data, Op op = {}, algorithm forced = algorithm::automatic) {
  return collective::allreduce_on(routed(data), comm, std::span<const T>(data), data, op, forced);
}

template <class Communicator, element T>
algorithm allreduce(Communicator& comm, std::span<T> data, algorithm forced) {
  return allreduce(comm, data, op::sum{}, forced);
}

// Out of place: `output` receives the result; `input` is not modified.
// Host buffers: the algorithms read the input where it is and write the
// result where it goes, at in-place speed. Device buffers are copied on
// the device and take the in-place path (direct, or staged once).
template <class Communicator, element T, reduction_operator Op = op::sum>
algorithm allreduce(Communicator& comm, std::span<const T> input, std::span<T> output, Op op = {},
                    algorithm forced = algorithm::automatic) {
  collective::check_output(input, output, input.size(), comm.transport().rank(), "allreduce");
  // min() is input.size() once check_output has passed; spelt out, it lets
  // GCC 12 at -O3 see the copy fits (else -Warray-bounds, on the path where
  // check_output threw for a too-small output).
  const std::size_t count = std::min(input.size(), output.size());
  const std::span<const T> given = input.first(count);
  const std::span<T> result = output.first(count);
  if (routed(given, result) == nullptr) return collective::allreduce_on(nullptr, comm, given, result, op, forced);
  if (input.data() != output.data()) copy_elements(comm, input.data(), count, output.data());
  return allreduce(comm, result, op, forced);
}

template <class Communicator, element T>
algorithm allreduce(Communicator& comm, std::span<const T> input, std::span<T> output, algorithm forced) {
  return allreduce(comm, input, output, op::sum{}, forced);
}

// Any contiguous container of elements (std::vector<float>, std::array, ...).
template <class Communicator, std::ranges::contiguous_range Range, reduction_operator Op = op::sum>
  requires element<std::ranges::range_value_t<Range>> &&
           (!std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<Range>>>)
algorithm allreduce(Communicator& comm, Range&& data, Op op = {}, algorithm forced = algorithm::automatic) {
  return allreduce(comm, std::span<std::ranges::range_value_t<Range>>(std::ranges::data(data), std::ranges::size(data)),
                   op, forced);
}

template <class Communicator, std::ranges::contiguous_range Range>
  requires element<std::ranges::range_value_t<Range>> &&
           (!std::is_const_v<std::remove_reference_t<std::ranges::range_reference_t<Range>>>)
algorithm allreduce(Communicator& comm, Range&& data, algorithm forced) {
  return allreduce(comm, std::forward<Range>(data), op::sum{}, forced);
}

}  // namespace chorus
