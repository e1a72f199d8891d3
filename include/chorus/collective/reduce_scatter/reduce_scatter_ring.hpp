// Ring reduce-scatter: the first pass of the ring allreduce, started one
// block earlier so that rank r ends owning block r. Pipelined in segments
// (ring_pipeline.hpp): each segment is passed on as soon as it is reduced.
//
// Cost: (n-1) alpha + (n-1)/n S beta + (n-1)/n S gamma for S = n * block,
// with the reduction overlapping the transfer. Chosen for large messages.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/ring_pipeline.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>

namespace chorus::collective {

// `data` holds n blocks of `block` elements and is used as the work buffer;
// on return block `rank` holds the reduction over all ranks. `compute`: where
// the reductions run (local_compute.hpp); each is settled before it is sent.
template <class X, class A, class Op, class Compute = host_compute>
void reduce_scatter_by_ring(X& ex, std::span<A> data, std::size_t block, const Op& op, ring_settings settings = {},
                            const Compute& compute = {}) {
  const int n = ex.size(), rank = ex.rank();
  if (n == 1 || block == 0) return;
  const auto hops = static_cast<std::size_t>(n - 1);
  const ring_geometry geometry(block * static_cast<std::size_t>(n), n, settings.segment_bytes / sizeof(A), hops,
                               ex.steps_left());
  ring_pipeline ring(ex, geometry, ex.phase(geometry.steps(), "ring hops x segments"), settings.depth);
  const auto place = [&](range r) { return data.subspan(r.offset, r.count); };
  const auto reduce = [&](range r, std::span<const A> arrived, bool) {
    compute.reduce(place(r), arrived, op, true);
    compute.settle();
    return place(r);
  };
  const std::span<A> window = compute.template window<A>(ring.depth() * geometry.segment());
  ring.reduce_hops(
      rank - 1, 0, hops, place, window, geometry.segment(), [](range r) { return r.count; }, reduce, false);
  ring.finish();
}

namespace algorithms {
struct reduce_scatter_ring {
  static constexpr algorithm id = algorithm::ring;
  static constexpr std::string_view cost = "(n-1) alpha + (n-1)/n S beta + (n-1)/n S gamma, pipelined in segments";
  static double seconds(const workload& w, const machine& m) {
    return (w.ranks - 1) * m.alpha + cost::share(w.ranks) * double(w.bytes) * (m.beta + m.gamma);
  }
  template <class X, class A, class Op, class Compute>
  static void run(X& ex, std::span<A> work, std::size_t block, const Op& op, const Compute& compute) {
    collective::reduce_scatter_by_ring(ex, work, block, op, {}, compute);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
