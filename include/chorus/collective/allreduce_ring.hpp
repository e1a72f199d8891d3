// Ring allreduce: reduce-scatter around the ring, then allgather.
//
// Each of the n blocks travels n-1 hops while being reduced, ending fully
// reduced at one rank (rank r owns block r+1), then travels n-1 more hops to
// reach everyone. Blocks are cut into segments and every segment is passed
// on as soon as it is reduced, so the reduction of one segment overlaps the
// transfer of the next; receives go through a window of `depth` segment
// buffers, which bounds the scratch memory at depth * segment bytes.
//
// Cost: 2(n-1) alpha + 2 (n-1)/n S beta + (n-1)/n S gamma (bandwidth-optimal).
// Chosen for large messages, where bandwidth dominates.
//
// Each final block is computed once, by its owner, so every rank ends with
// the same bits.
#pragma once

#include <chorus/collective/blocks.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/scratch.hpp>
#include <chorus/collective/reduce_local.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace chorus::collective {

struct ring_settings {
  std::size_t segment_bytes = 256u << 10;
  std::size_t depth = 4;  // segment receives in flight
};

template <class X, class A, class Op>
void allreduce_ring(X& ex, std::span<A> data, const Op& op, ring_settings settings = {}) {
  const int n = ex.size(), rank = ex.rank();
  if (n == 1 || data.empty()) {
    finalize_all(data, op, static_cast<std::size_t>(n));
    return;
  }
  const block_partition blocks{data.size(), static_cast<std::size_t>(n)};
  const std::size_t largest = blocks.size(0);
  // Every (hop, segment) needs its own step: segments grow until they fit.
  const std::size_t hops = 2 * static_cast<std::size_t>(n - 1);
  std::size_t segment = std::max<std::size_t>(1, settings.segment_bytes / sizeof(A));
  const std::size_t most_segments = std::max<std::size_t>(1, ex.steps_left() / hops);
  segment = std::max(segment, (largest + most_segments - 1) / most_segments);
  const std::size_t segments_per_block = (largest + segment - 1) / segment;
  const std::size_t depth = std::max<std::size_t>(1, std::min(settings.depth, segments_per_block));

  const int left = (rank - 1 + n) % n, right = (rank + 1) % n;
  const auto block_of = [&](int b) { return static_cast<std::size_t>(((b % n) + n) % n); };
  const auto piece = [&](std::size_t block, std::size_t k) {
    const std::size_t begin = std::min(k * segment, blocks.size(block));
    const std::size_t end = std::min(begin + segment, blocks.size(block));
    return data.subspan(blocks.offset(block) + begin, end - begin);
  };
  const auto pieces = [&](std::size_t block) { return (blocks.size(block) + segment - 1) / segment; };
  const auto ring_steps = ex.phase(hops * segments_per_block, "ring hops x segments");
  const auto step_of = [&](std::size_t hop, std::size_t k) { return ring_steps(hop * segments_per_block + k); };

  std::vector<typename X::request> sends;
  sends.reserve(hops * segments_per_block);
  for (std::size_t k = 0; k < pieces(block_of(rank)); ++k)
    sends.push_back(ex.isend(std::span<const A>(piece(block_of(rank), k)), right, step_of(0, k)));

  // Reduce-scatter: at hop h, block r-h-1 arrives from the left.
  const std::span<A> window = collective::scratch<A>(depth * segment);
  std::vector<typename X::request> receives(depth);
  for (std::size_t hop = 0; hop + 1 < static_cast<std::size_t>(n); ++hop) {
    const std::size_t block = block_of(rank - static_cast<int>(hop) - 1);
    const std::size_t count = pieces(block);
    const auto slot = [&](std::size_t k) {
      return window.subspan((k % depth) * segment, piece(block, k).size());
    };
    for (std::size_t k = 0; k < std::min(depth, count); ++k) receives[k] = ex.irecv(slot(k), left, step_of(hop, k));
    for (std::size_t k = 0; k < count; ++k) {
      const std::span<A> target = piece(block, k);
      ex.finish_receive(receives[k % depth], target.size_bytes());
      reduce_into(target, std::span<const A>(slot(k)), op, true);
      if (k + depth < count) receives[k % depth] = ex.irecv(slot(k + depth), left, step_of(hop, k + depth));
      const bool final_block = hop + 2 == static_cast<std::size_t>(n);
      if (final_block) finalize_all(target, op, static_cast<std::size_t>(n));
      sends.push_back(ex.isend(std::span<const A>(target), right, step_of(hop + 1, k)));
    }
  }

  // Allgather: at hop n-1+h, finished block r-h arrives from the left and is
  // passed on (except by the rank that owns the next block's final copy).
  for (std::size_t h = 0; h + 1 < static_cast<std::size_t>(n); ++h) {
    const std::size_t block = block_of(rank - static_cast<int>(h));
    const std::size_t hop = static_cast<std::size_t>(n) - 1 + h;
    std::vector<typename X::request> arriving;
    for (std::size_t k = 0; k < pieces(block); ++k) arriving.push_back(ex.irecv(piece(block, k), left, step_of(hop, k)));
    for (std::size_t k = 0; k < pieces(block); ++k) {
      ex.finish_receive(arriving[k], piece(block, k).size_bytes());
      if (h + 2 < static_cast<std::size_t>(n))
        sends.push_back(ex.isend(std::span<const A>(piece(block, k)), right, step_of(hop + 1, k)));
    }
  }
  ex.wait_all(sends);
}

}  // namespace chorus::collective
