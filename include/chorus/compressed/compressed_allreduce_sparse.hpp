// Sparse allreduce: the sum of every rank's sparsified tensor (codec/topk.hpp,
// codec/randomk.hpp), the same bits on every rank. Chosen for every sparse
// codec (codec.hpp: sparse), the only scheme that moves one.
//
// - Indices that differ by rank (top-k): an allgather of every rank's
//   (index, value) parts, then each rank adds the n parts in rank order.
//   Cost, k kept of N: the allgather of 8k bytes per rank, about
//   (n-1) alpha + (n-1) 8k beta, + n k adds. Cheaper than a dense ring
//   (2 (n-1)/n 4N beta) while k < N / n.
// - Indices that agree (random-k, shared seed): the k kept values are summed
//   by the plain allreduce (its own algorithm, chosen by size), after a
//   16-byte allreduce has checked that every rank used the same key. Cost:
//   the allreduce of 4k bytes + one of 16.
//
// Error: the codec's, once per contribution (a dropped element's whole
// value, which error feedback keeps for the next call).
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/codec/randomk.hpp>
#include <chorus/collective/allgather/allgather.hpp>
#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/compressed/scaling.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/reduce_op.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace chorus::compressed {

namespace detail {

// Every rank must have drawn its indices from the same key: max over ranks
// of (key, ~key) equals (key, ~key) on every rank only if all keys are equal,
// and otherwise differs on every rank (the largest key's holder sees it in
// the second half), so all ranks fail together.
template <class Communicator>
void require_same_key(Communicator& comm, std::uint64_t key) {
  std::array<std::uint64_t, 2> mine{key, ~key}, most = mine;
  allreduce(comm, std::span<std::uint64_t>(most), op::max{});
  if (most != mine)
    throw error(errc::mismatch,
                "sparse allreduce: the ranks drew random-k indices with different keys (a different seed, or a "
                "different number of earlier encode calls on the codec)",
                {comm.transport().rank(), -1, "compressed_allreduce"});
}

}  // namespace detail

// data <- sum (or average) over ranks of decode(encode(data)).
template <class Communicator, class Compute>
void allreduce_sparse_with(Communicator& comm, std::span<float> data, const Compute& compute, bool average) {
  using plain = typename Compute::codec_type;
  static_assert(codec::sparse<plain>, "the sparse allreduce moves sparse codecs' bytes");
  const std::size_t count = data.size();
  const std::size_t each = compute.codec().encoded_bytes(count);
  const auto n = static_cast<std::size_t>(comm.size());
  if constexpr (codec::sparse_indices_agree<plain>) {
    const std::span<std::byte> encoded = compute.bytes(scratch_for::mine, each);
    compute.encode(data, encoded, 0, 0, count);
    compute.settle();
    if (count == 0) return;
    detail::require_same_key(comm, plain::key_of(encoded));
    const std::span<std::byte> values = plain::values_of(encoded);
    allreduce(comm, std::span<float>(reinterpret_cast<float*>(values.data()), values.size() / sizeof(float)),
              op::sum{});
    compute.decode(encoded, data);
  } else {
    const std::span<std::byte> gathered = compute.bytes(scratch_for::gathered, each * n);
    const std::size_t mine = each * static_cast<std::size_t>(comm.rank());
    compute.encode(data, gathered.subspan(mine, each), 0, 0, count);
    compute.settle();
    allgather(comm, as_octets(gathered));
    compute.zero(data);
    for (std::size_t r = 0; r < n; ++r) compute.decode_add(gathered.subspan(each * r, each), data);
  }
  if (average) compute.divide(data, static_cast<float>(n));
}

namespace algorithms {
struct allreduce_sparse {
  static constexpr algorithm id = algorithm::sparse;
  static constexpr std::string_view cost =
      "top-k: allgather of 8k B per rank, (n-1) alpha + (n-1) 8k beta; random-k: allreduce of 4k B + 16 B";
  static constexpr std::string_view needs = "sparse codecs (topk, randomk)";
  static bool suits(const workload& w) { return w.sparse; }
  static double seconds(const workload& w, const machine& m) {
    return (w.ranks - 1) * (m.alpha + double(w.bytes) * m.beta);
  }
  template <class Communicator, class Compute>
  static void run(Communicator& comm, std::span<float> data, const Compute& compute, bool average, float, std::size_t)
    requires codec::sparse<typename Compute::codec_type>
  {
    compressed::allreduce_sparse_with(comm, data, compute, average);
  }
};
}  // namespace algorithms

}  // namespace chorus::compressed
