// The collectives on a chorus::nccl::communicator: the same front doors as
// on a chorus communicator (chorus::allreduce(gpus, data), ...), found by
// overload resolution, so code written against "a communicator" (the
// schemes) runs on an NCCL one unchanged.
//
// Device memory: allreduce, broadcast, reduce, allgather and reduce_scatter
// are NCCL's own; alltoall, gather and scatter are grouped ncclSend/ncclRecv
// plans (below), started together so they cannot deadlock; each returns
// algorithm::nccl, the registry's backend entry (collective/machinery/selection.hpp),
// and CHORUS_DEBUG=1 logs "nccl (backend)". Cost: NCCL's (for allreduce,
// its ring: 2 (n-1) alpha + 2 (n-1)/n S beta over NVLink or the network).
// Host memory: the chorus communicator's collectives over UCX, with their
// algorithms and report.
//
// Types: every type NCCL has that chorus has (int8, uint8, int32, uint32,
// int64, uint64, half, bfloat16, float, double); NCCL has no 16-bit integers
// (an error) and chorus no fp8. Ops: sum, prod, min, max, and avg through
// ncclAvg; a user-defined op is an error on device memory. NCCL's bits are
// NCCL's: half and bfloat16 sum per hop in their own precision, and avg
// premultiplies floats, so they can differ in the last bits from the UCX
// path (which reduces in float and divides once); every rank still ends
// with the same bits.
#pragma once

#include <chorus/collective/allgather/allgather.hpp>
#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/collective/alltoall/alltoall.hpp>
#include <chorus/collective/broadcast/broadcast.hpp>
#include <chorus/collective/fusion.hpp>
#include <chorus/collective/gather/gather.hpp>
#include <chorus/collective/machinery/arguments.hpp>
#include <chorus/collective/reduce/reduce.hpp>
#include <chorus/collective/reduce_scatter/reduce_scatter.hpp>
#include <chorus/collective/scatter/scatter.hpp>
#include <chorus/nccl/communicator.hpp>
#include <chorus/record/call.hpp>

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace chorus::nccl {

// One send or receive of a grouped plan.
struct transfer {
  bool sending = false;
  std::size_t offset = 0;  // elements into the buffer it names
  std::size_t count = 0;
  int peer = 0;
};

// The plans: which sends and receives each rank posts in one group.
// alltoall: block p of the input to rank p, block p of the output from it.
inline std::vector<transfer> alltoall_plan(int ranks, std::size_t block) {
  std::vector<transfer> plan;
  for (int p = 0; p < ranks; ++p) {
    plan.push_back({true, static_cast<std::size_t>(p) * block, block, p});
    plan.push_back({false, static_cast<std::size_t>(p) * block, block, p});
  }
  return plan;
}
// gather: every rank sends its block to the root (the root too, to itself,
// unless `in_place`: its block is already there), which receives block p
// from rank p. Sends read `mine`, receives fill `all`.
inline std::vector<transfer> gather_plan(int ranks, int rank, int root, std::size_t block, bool in_place = false) {
  std::vector<transfer> plan;
  if (rank != root || !in_place) plan.push_back({true, 0, block, root});
  if (rank == root)
    for (int p = 0; p < ranks; ++p)
      if (p != root || !in_place) plan.push_back({false, static_cast<std::size_t>(p) * block, block, p});
  return plan;
}
// scatter: the root sends block p of `all` to rank p; every rank receives
// its block into `mine` (the root not, `in_place`: `mine` is its block).
inline std::vector<transfer> scatter_plan(int ranks, int rank, int root, std::size_t block, bool in_place = false) {
  std::vector<transfer> plan;
  if (rank == root)
    for (int p = 0; p < ranks; ++p)
      if (p != root || !in_place) plan.push_back({true, static_cast<std::size_t>(p) * block, block, p});
  if (rank != root || !in_place) plan.push_back({false, 0, block, root});
  return plan;
}

namespace detail {

template <class Op>
constexpr std::optional<reduction> reduction_of() noexcept {
  constexpr std::string_view name = op::name_of<Op>();
  if (name == op::sum::name) return reduction::sum;
  if (name == op::prod::name) return reduction::prod;
  if (name == op::max::name) return reduction::max;
  if (name == op::min::name) return reduction::min;
  if (name == op::avg::name) return reduction::avg;
  return std::nullopt;
}

template <class Op>
reduction require_reduction(const communicator& comm, const char* operation) {
  if (constexpr auto known = reduction_of<Op>()) return *known;
  throw error(errc::invalid_argument,
              "NCCL reduces device buffers with sum, prod, min, max and avg here, not " +
                  std::string(op::name_of<Op>()) +
                  (op::premultiplies<Op> ? " (multiply on the device, then sum: the torch backend does)" : ""),
              {comm.rank(), -1, operation});
}

inline constexpr int no_root = -1000;

// The checks every device call makes, the agreement check (CHORUS_CHECK),
// the backend's choice and its report.
template <element T>
algorithm begin(communicator& comm, const char* operation, std::size_t count, std::string_view op, int root,
                algorithm forced) {
  constexpr dtype type = dtype_of<T>;
  if (type == dtype::int16 || type == dtype::uint16)
    throw error(errc::invalid_argument, "NCCL has no " + std::string(to_string(type)) + " type",
                {comm.host().transport().rank(), -1, operation});
  if (root != no_root) collective::check_root(root, comm.size(), comm.host().transport().rank(), operation);
  comm.require_merged(operation);
  // Only memory NCCL moves gets here (communicator::moves); host memory on
  // another rank takes the host communicator's path, whose check this meets.
  collective::check_if_enabled(comm.host(),
                               {operation, count, type, op, root == no_root ? -1 : root, memory_kind::cuda_device});
  const choice made = choose_backend("nccl", operation, forced);
  report(comm.host(), operation, count * sizeof(T), type, made);
  record::recorded_call::moved(record::path::nccl);
  return made.chosen;
}

// Posts `plan` as one group: sends read `from`, receives fill `into`.
template <element T>
void run_plan(communicator& comm, const char* operation, const std::vector<transfer>& plan, const T* from, T* into) {
  comm.run(operation, [&](endpoint& nccl, stream_handle stream) {
    nccl.group_start();
    for (const transfer& t : plan) {
      if (t.sending)
        nccl.send(from + t.offset, t.count, dtype_of<T>, t.peer, stream);
      else
        nccl.recv(into + t.offset, t.count, dtype_of<T>, t.peer, stream);
    }
    nccl.group_end();
  });
}

inline std::size_t block_of(const communicator& comm, std::size_t total, const char* operation) {
  const auto n = static_cast<std::size_t>(comm.size());
  if (total % n != 0)
    throw error(errc::invalid_argument,
                std::to_string(total) + " elements do not split into " + std::to_string(n) + " equal blocks",
                {comm.rank(), -1, operation});
  return total / n;
}

}  // namespace detail

// --- allreduce ----------------------------------------------------------------
template <element T, reduction_operator Op = op::sum>
algorithm allreduce(communicator& comm, std::span<const T> input, std::span<T> output, Op op = {},
                    algorithm forced = algorithm::automatic) {
  if (!comm.moves("allreduce", input, output)) return chorus::allreduce(comm.host(), input, output, op, forced);
  const record::recorded_call recorded(comm.host().recorder(),
                                       record::collective("allreduce", input, op::name_of<Op>()));
  collective::check_output(input, output, input.size(), comm.host().transport().rank(), "allreduce");
  const reduction how = detail::require_reduction<Op>(comm, "allreduce");
  const algorithm ran = detail::begin<T>(comm, "allreduce", input.size(), op::name_of<Op>(), detail::no_root, forced);
  comm.run("allreduce", [&](endpoint& nccl, stream_handle stream) {
    nccl.all_reduce(input.data(), output.data(), input.size(), dtype_of<T>, how, stream);
  });
  return ran;
}
template <element T, reduction_operator Op = op::sum>
algorithm allreduce(communicator& comm, std::span<T> data, Op op = {}, algorithm forced = algorithm::automatic) {
  return allreduce(comm, std::span<const T>(data), data, op, forced);
}
template <element T>
algorithm allreduce(communicator& comm, std::span<T> data, algorithm forced) {
  return allreduce(comm, data, op::sum{}, forced);
}

// --- broadcast and reduce -------------------------------------------------------
template <element T>
algorithm broadcast(communicator& comm, std::span<T> data, int root, algorithm forced = algorithm::automatic) {
  if (!comm.moves("broadcast", data)) return chorus::broadcast(comm.host(), data, root, forced);
  const record::recorded_call recorded(comm.host().recorder(), record::collective("broadcast", data, {}, root));
  const algorithm ran = detail::begin<T>(comm, "broadcast", data.size(), "", root, forced);
  comm.run("broadcast", [&](endpoint& nccl, stream_handle stream) {
    nccl.broadcast(data.data(), data.data(), data.size(), dtype_of<T>, root, stream);
  });
  return ran;
}

// The root's output receives op over every rank's input; the others' output
// is not used (it may be empty).
template <element T, reduction_operator Op = op::sum>
algorithm reduce(communicator& comm, std::span<const T> input, std::span<T> output, int root, Op op = {}) {
  const std::span<T> used = comm.rank() == root ? output : std::span<T>();
  if (!comm.moves("reduce", input, used)) return chorus::reduce(comm.host(), input, output, root, op);
  const record::recorded_call recorded(comm.host().recorder(),
                                       record::collective("reduce", input, op::name_of<Op>(), root));
  if (comm.rank() == root)
    collective::check_output(input, output, input.size(), comm.host().transport().rank(), "reduce");
  const reduction how = detail::require_reduction<Op>(comm, "reduce");
  const algorithm ran = detail::begin<T>(comm, "reduce", input.size(), op::name_of<Op>(), root, algorithm::automatic);
  comm.run("reduce", [&](endpoint& nccl, stream_handle stream) {
    nccl.reduce(input.data(), used.data(), input.size(), dtype_of<T>, how, root, stream);
  });
  return ran;
}
template <element T, reduction_operator Op = op::sum>
algorithm reduce(communicator& comm, std::span<T> data, int root, Op op = {}) {
  return reduce(comm, std::span<const T>(data), data, root, op);
}

// --- allgather and reduce_scatter ------------------------------------------------
// `all` holds size() blocks; this rank's is block rank() (in place) or `mine`.
template <element T>
algorithm allgather(communicator& comm, std::span<const T> mine, std::span<T> all,
                    algorithm forced = algorithm::automatic) {
  if (!comm.moves("allgather", mine, all)) return chorus::allgather(comm.host(), mine, all, forced);
  const record::recorded_call recorded(comm.host().recorder(), record::collective("allgather", mine));
  const std::size_t needed = mine.size() * static_cast<std::size_t>(comm.size());
  collective::check_output(mine, all, needed, comm.host().transport().rank(), "allgather",
                           collective::in_place_form::input_at(mine.size() * static_cast<std::size_t>(comm.rank())));
  const algorithm ran = detail::begin<T>(comm, "allgather", mine.size(), "", detail::no_root, forced);
  comm.run("allgather", [&](endpoint& nccl, stream_handle stream) {
    nccl.all_gather(mine.data(), all.data(), mine.size(), dtype_of<T>, stream);
  });
  return ran;
}
template <element T>
algorithm allgather(communicator& comm, std::span<T> all, algorithm forced = algorithm::automatic) {
  if (!comm.moves("allgather", all)) return chorus::allgather(comm.host(), all, forced);
  const record::recorded_call recorded(comm.host().recorder(), record::collective("allgather", all));
  const std::size_t block = detail::block_of(comm, all.size(), "allgather");
  const algorithm ran = detail::begin<T>(comm, "allgather", block, "", detail::no_root, forced);
  comm.run("allgather", [&](endpoint& nccl, stream_handle stream) {
    nccl.all_gather(all.data() + block * static_cast<std::size_t>(comm.rank()), all.data(), block, dtype_of<T>, stream);
  });
  return ran;
}

// `input` holds size() blocks of output.size() elements; `output` gets op
// over every rank's block rank().
template <element T, reduction_operator Op = op::sum>
algorithm reduce_scatter(communicator& comm, std::span<const T> input, std::span<T> output, Op op = {},
                         algorithm forced = algorithm::automatic) {
  if (!comm.moves("reduce_scatter", input, output))
    return chorus::reduce_scatter(comm.host(), input, output, op, forced);
  const record::recorded_call recorded(comm.host().recorder(),
                                       record::collective("reduce_scatter", input, op::name_of<Op>()));
  const std::size_t block = detail::block_of(comm, input.size(), "reduce_scatter");
  if (output.size() != block)
    throw error(errc::invalid_argument,
                "output holds " + std::to_string(output.size()) + " elements, needs " + std::to_string(block),
                {comm.host().transport().rank(), -1, "reduce_scatter"});
  collective::check_output(input, output, block, comm.host().transport().rank(), "reduce_scatter",
                           collective::in_place_form::output_at(block * static_cast<std::size_t>(comm.rank())));
  const reduction how = detail::require_reduction<Op>(comm, "reduce_scatter");
  const algorithm ran =
      detail::begin<T>(comm, "reduce_scatter", input.size(), op::name_of<Op>(), detail::no_root, forced);
  comm.run("reduce_scatter", [&](endpoint& nccl, stream_handle stream) {
    nccl.reduce_scatter(input.data(), output.data(), block, dtype_of<T>, how, stream);
  });
  return ran;
}
template <element T>
algorithm reduce_scatter(communicator& comm, std::span<const T> input, std::span<T> output, algorithm forced) {
  return reduce_scatter(comm, input, output, op::sum{}, forced);
}

// --- alltoall, gather and scatter: grouped send/recv plans -----------------------
template <element T>
algorithm alltoall(communicator& comm, std::span<const T> input, std::span<T> output) {
  if (!comm.moves("alltoall", input, output)) return chorus::alltoall(comm.host(), input, output);
  const record::recorded_call recorded(comm.host().recorder(), record::collective("alltoall", input));
  const std::size_t block = detail::block_of(comm, input.size(), "alltoall");
  collective::check_output(input, output, input.size(), comm.host().transport().rank(), "alltoall",
                           collective::in_place_form::none());
  const algorithm ran = detail::begin<T>(comm, "alltoall", input.size(), "", detail::no_root, algorithm::automatic);
  detail::run_plan(comm, "alltoall", alltoall_plan(comm.size(), block), input.data(), output.data());
  return ran;
}

// The root's `all` receives every rank's `mine`, in rank order.
template <element T>
algorithm gather(communicator& comm, std::span<const T> mine, std::span<T> all, int root) {
  const std::span<T> used = comm.rank() == root ? all : std::span<T>();
  if (!comm.moves("gather", mine, used)) return chorus::gather(comm.host(), mine, all, root);
  const record::recorded_call recorded(comm.host().recorder(), record::collective("gather", mine, {}, root));
  const bool in_place =
      comm.rank() == root &&
      collective::check_output(mine, all, mine.size() * static_cast<std::size_t>(comm.size()),
                               comm.host().transport().rank(), "gather",
                               collective::in_place_form::input_at(mine.size() * static_cast<std::size_t>(root)));
  const algorithm ran = detail::begin<T>(comm, "gather", mine.size(), "", root, algorithm::automatic);
  detail::run_plan(comm, "gather", gather_plan(comm.size(), comm.rank(), root, mine.size(), in_place), mine.data(),
                   used.data());
  return ran;
}

// Every rank's `mine` receives block rank() of the root's `all`.
template <element T>
algorithm scatter(communicator& comm, std::span<const T> all, std::span<T> mine, int root) {
  const std::span<const T> used = comm.rank() == root ? all : std::span<const T>();
  if (!comm.moves("scatter", used, mine)) return chorus::scatter(comm.host(), all, mine, root);
  const record::recorded_call recorded(comm.host().recorder(), record::collective("scatter", mine, {}, root));
  if (comm.rank() == root && all.size() < mine.size() * static_cast<std::size_t>(comm.size()))
    throw error(errc::invalid_argument,
                "the root's input holds " + std::to_string(all.size()) + " elements, needs " +
                    std::to_string(mine.size() * static_cast<std::size_t>(comm.size())),
                {comm.host().transport().rank(), -1, "scatter"});
  const bool in_place =
      comm.rank() == root &&
      collective::check_output(all, mine, mine.size(), comm.host().transport().rank(), "scatter",
                               collective::in_place_form::output_at(mine.size() * static_cast<std::size_t>(root)));
  const algorithm ran = detail::begin<T>(comm, "scatter", mine.size(), "", root, algorithm::automatic);
  detail::run_plan(comm, "scatter", scatter_plan(comm.size(), comm.rank(), root, mine.size(), in_place), used.data(),
                   mine.data());
  return ran;
}

// --- point to point ----------------------------------------------------------------
// ncclSend / ncclRecv (NCCL has no tags: messages between two ranks match in
// order); host memory through the chorus communicator.
template <element T>
void send(communicator& comm, std::span<const T> data, int peer) {
  if (!comm.moves("send", data)) return comm.host().send(data, peer);
  const record::recorded_call recorded(comm.host().recorder(), record::point_to_point("send", data, peer));
  record::recorded_call::moved(record::path::nccl);
  detail::run_plan(comm, "send", {{true, 0, data.size(), peer}}, data.data(), static_cast<T*>(nullptr));
}
template <element T>
void recv(communicator& comm, std::span<T> data, int peer) {
  if (!comm.moves("recv", data)) return comm.host().recv(data, peer);
  const record::recorded_call recorded(comm.host().recorder(), record::point_to_point("recv", data, peer));
  record::recorded_call::moved(record::path::nccl);
  detail::run_plan(comm, "recv", {{false, 0, data.size(), peer}}, static_cast<const T*>(nullptr), data.data());
}

// --- fusion and barrier --------------------------------------------------------------
// Device tensors: one ncclAllReduce each, in one group (NCCL fuses them;
// no packing copies). Host tensors: the chorus communicator's buckets.
// Returns the number of calls made (a group counts as one).
template <element T, reduction_operator Op = op::sum>
std::size_t fused_allreduce(communicator& comm, std::span<const std::span<T>> tensors, Op op = {},
                            std::size_t bucket_bytes = 0) {
  std::vector<std::span<T>> on_device, on_host;
  std::size_t elements = 0;
  for (const std::span<T>& tensor : tensors) {
    if (tensor.empty()) continue;
    const bool device = comm.moves("fused_allreduce", tensor);
    (device ? on_device : on_host).push_back(tensor);
    elements += device ? tensor.size() : 0;
  }
  std::size_t calls = on_host.empty() ? 0 : chorus::fused_allreduce(comm.host(), on_host, op, bucket_bytes);
  if (on_device.empty()) return calls;
  record::call_description described = record::collective("fused_allreduce", std::span<const T>(), op::name_of<Op>());
  described.count = elements;
  described.bytes = elements * sizeof(T);
  const record::recorded_call recorded(comm.host().recorder(), described);
  const reduction how = detail::require_reduction<Op>(comm, "fused_allreduce");
  detail::begin<T>(comm, "allreduce", elements, op::name_of<Op>(), detail::no_root, algorithm::automatic);
  comm.run("fused_allreduce", [&](endpoint& nccl, stream_handle stream) {
    nccl.group_start();
    for (const std::span<T>& tensor : on_device)
      nccl.all_reduce(tensor.data(), tensor.data(), tensor.size(), dtype_of<T>, how, stream);
    nccl.group_end();
  });
  return calls + 1;
}
template <element T, reduction_operator Op = op::sum>
std::size_t fused_allreduce(communicator& comm, const std::vector<std::span<T>>& tensors, Op op = {},
                            std::size_t bucket_bytes = 0) {
  return fused_allreduce(comm, std::span<const std::span<T>>(tensors), op, bucket_bytes);
}

// NCCL has no barrier; the ranks meet on the chorus communicator.
inline void barrier(communicator& comm) { comm.host().barrier(); }

}  // namespace chorus::nccl

// Qualified calls (chorus::allreduce(gpus, ...)) see these overloads too; the
// NCCL communicator's are the more specialised, so they win.
namespace chorus {
using nccl::allgather;
using nccl::allreduce;
using nccl::alltoall;
using nccl::barrier;
using nccl::broadcast;
using nccl::fused_allreduce;
using nccl::gather;
using nccl::reduce;
using nccl::reduce_scatter;
using nccl::scatter;
}  // namespace chorus
