// Ring allgather: the second pass of the ring allreduce. Block r-h-1
// reaches rank r at hop h; each segment is forwarded as soon as it lands
// (ring_pipeline.hpp), so no rank waits for a whole block before passing
// it on.
//
// Cost: (n-1) alpha + (n-1)/n S beta for S = n * block bytes. Chosen for
// large messages.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/ring_pipeline.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>

namespace chorus::collective {

// Larger segments than the reduce pass: with no reduction to overlap, a
// segment only buys earlier forwarding, and each costs a message's alpha,
// a share of a segment's transfer that shrinks as the segment grows.
inline constexpr ring_settings allgather_ring_settings{1u << 20, 4};

// `data` holds n blocks of `block` elements; this rank's own block is filled.
template <class X, class A>
void allgather_by_ring(X& ex, std::span<A> data, std::size_t block, ring_settings settings = allgather_ring_settings) {
  const int n = ex.size(), rank = ex.rank();
  if (n == 1 || block == 0) return;
  const auto hops = static_cast<std::size_t>(n - 1);
  const ring_geometry geometry(block * static_cast<std::size_t>(n), n, settings.segment_bytes / sizeof(A), hops,
                               ex.steps_left());
  ring_pipeline ring(ex, geometry, ex.phase(geometry.steps(), "ring hops x segments"), settings.depth);
  const auto place = [&](range r) { return data.subspan(r.offset, r.count); };
  ring.gather_hops(rank, 0, hops, place, [](range) {}, true);
  ring.finish();
}

namespace algorithms {
struct allgather_ring {
  static constexpr algorithm id = algorithm::ring;
  static constexpr std::string_view cost = "(n-1) alpha + (n-1)/n S beta, pipelined in segments";
  static double seconds(const workload& w, const machine& m) {
    return (w.ranks - 1) * m.alpha + cost::share(w.ranks) * double(w.bytes) * m.beta;
  }
  template <class X, class A, class Compute>
  static void run(X& ex, std::span<A> all, std::size_t block, const Compute&) {
    collective::allgather_by_ring(ex, all, block);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
