// Pipelined ring allgather of encoded blocks: the second phase of both
// compressed allreduce schemes. Each block was encoded once by its owner;
// its bytes travel the ring unchanged, segment by segment, so every rank
// decodes the same bytes and all end with identical bits.
//
// Cost: (n-1) alpha + (n-1)/n S_enc beta. Each rank sends only to its right
// neighbour and receives only from its left: one flow per link, which a
// shaped TCP network carries at its rate (n-1 flows per link lose about a
// tenth to a third of it; docs/performance.md).
#pragma once

#include <chorus/collective/exchange.hpp>
#include <chorus/compressed/partition.hpp>

#include <cstddef>
#include <span>
#include <vector>

namespace chorus::compressed {

struct ring_allgather_plan {
  int owner_shift = 0;        // rank r holds block r + owner_shift complete in `gathered`
  std::size_t first_hop = 0;  // its steps start at geometry.step(first_hop, 0) of `steps`
};

// Sends this rank's own block (complete in `gathered`) on the ring's first
// hop; ring_allgather expects it sent. Apart, so that a caller can overlap
// other work with that hop (the ring scheme sends its block as the
// reduce-scatter's last hop instead).
template <class X, class Codec>
void ring_allgather_send_own(X& ex, const segmented_partition<Codec>& geometry, const tag::phase& steps,
                             std::span<std::byte> gathered, ring_allgather_plan plan,
                             std::vector<typename X::request>& sends) {
  const int n = ex.size(), right = (ex.rank() + 1) % n;
  if (n == 1) return;
  const int own = geometry.block_of(ex.rank() + plan.owner_shift);
  for (std::size_t k = 0; k < geometry.pieces(own); ++k) {
    const std::span<const std::byte> piece = geometry.encoded(gathered, geometry.piece(own, k));
    sends.push_back(ex.isend(piece, right, steps(geometry.step(plan.first_hop, k))));
  }
}

// Receives every other block, forwarding each piece right as it lands and
// then calling arrived(range) for it. Appends its sends to `sends` without
// waiting for them.
template <class X, class Codec, class Arrived>
void ring_allgather(X& ex, const segmented_partition<Codec>& geometry, const tag::phase& steps,
                    std::span<std::byte> gathered, ring_allgather_plan plan, std::vector<typename X::request>& sends,
                    Arrived&& arrived) {
  const int n = ex.size(), rank = ex.rank(), left = (rank - 1 + n) % n, right = (rank + 1) % n;
  if (n == 1) return;
  const auto send_right = [&](range r, std::size_t hop, std::size_t k) {
    sends.push_back(ex.isend(std::span<const std::byte>(geometry.encoded(gathered, r)), right, steps(geometry.step(hop, k))));
  };
  const int own = geometry.block_of(rank + plan.owner_shift);
  std::vector<typename X::request> arriving;
  for (int h = 0; h + 1 < n; ++h) {
    const int block = geometry.block_of(own - 1 - h);
    const std::size_t hop = plan.first_hop + static_cast<std::size_t>(h);
    arriving.clear();
    for (std::size_t k = 0; k < geometry.pieces(block); ++k)
      arriving.push_back(ex.irecv(geometry.encoded(gathered, geometry.piece(block, k)), left, steps(geometry.step(hop, k))));
    for (std::size_t k = 0; k < geometry.pieces(block); ++k) {
      const range r = geometry.piece(block, k);
      ex.finish_receive(arriving[k], geometry.encoded_size(r));
      if (h + 2 < n) send_right(r, hop + 1, k);
      arrived(r);
    }
  }
}

}  // namespace chorus::compressed
