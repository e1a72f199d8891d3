// Ring allreduce: reduce-scatter around the ring, then allgather.
//
// Each of the n blocks travels n-1 hops while being reduced, ending fully
// reduced at one rank (rank r owns block r+1), then travels n-1 more hops to
// reach everyone. Both passes are the pipelined ring of ring_pipeline.hpp:
// every segment is passed on as soon as it is reduced, so the reduction of
// one segment overlaps the transfer of the next, and scratch is depth x
// segment bytes.
//
// Cost: 2(n-1) alpha + 2 (n-1)/n S beta + (n-1)/n S gamma (bandwidth-optimal).
// Chosen for large messages, where bandwidth dominates.
//
// Each final block is computed once, by its owner, so every rank ends with
// the same bits.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/collective/machinery/ring_pipeline.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstddef>
#include <span>
#include <string_view>

namespace chorus::collective {

// `input` to `data`, which may be the same span (in place): the reduce
// pass sends this rank's first block from `input` and combines each
// arriving segment with its `input` part into `data`, so out of place
// costs no extra pass. With `hooks` (a buffer staged part by part,
// route/memory_router.hpp; in place) it says before touching each segment
// that it needs it, and when each segment is final: the segment this rank
// finishes reducing, then each one the gather pass brings. `compute` says
// where the reductions run (local_compute.hpp: the host, or the device on
// the direct path); each reduced segment is settled before it is sent on.
template <class X, class A, class Op, class Compute = host_compute>
void allreduce_by_ring(X& ex, std::span<const A> input, std::span<A> data, const Op& op, ring_settings settings = {},
                       staging_hooks* hooks = nullptr, const Compute& compute = {}) {
  const int n = ex.size(), rank = ex.rank();
  const auto need = [&](range r) {
    if (hooks != nullptr) hooks->need(r.offset * sizeof(A), r.count * sizeof(A));
  };
  const auto done = [&](range r) {
    if (hooks != nullptr) hooks->done(r.offset * sizeof(A), r.count * sizeof(A));
  };
  if (n == 1 || data.empty()) {
    need({0, data.size()});
    compute.copy(input, data);
    compute.finalize(data, op, static_cast<std::size_t>(n));
    compute.settle();
    done({0, data.size()});
    return;
  }
  const auto hops = static_cast<std::size_t>(n - 1);
  const ring_geometry geometry(data.size(), n, settings.segment_bytes / sizeof(A), 2 * hops, ex.steps_left());
  ring_pipeline ring(ex, geometry, ex.phase(geometry.steps(), "ring hops x segments"), settings.depth);
  const auto place = [&](range r) { return data.subspan(r.offset, r.count); };
  const auto given = [&](range r) { return input.subspan(r.offset, r.count); };
  const auto own = [&](range r) {
    need(r);
    return given(r);
  };
  const auto reduce = [&](range r, std::span<const A> arrived, bool last) {
    need(r);
    const std::span<A> target = place(r);
    compute.reduce(target, given(r), arrived, op, true);
    if (last) compute.finalize(target, op, static_cast<std::size_t>(n));
    compute.settle();
    if (last) done(r);
    return target;
  };
  const std::span<A> window = compute.template window<A>(ring.depth() * geometry.segment());
  // The reduce pass needs every block (its own first, then one per hop), so
  // the gather pass receives only into parts already needed.
  ring.reduce_hops(rank, 0, hops, own, window, geometry.segment(), [](range r) { return r.count; }, reduce, true);
  // Rank r now owns block r+1, already sent on as the first gather hop.
  ring.gather_hops(rank + 1, hops, hops, place, done, false);
  ring.finish();
}

namespace algorithms {
struct allreduce_ring {
  static constexpr algorithm id = algorithm::ring;
  static constexpr std::string_view cost = "2 (n-1) alpha + 2 (n-1)/n S beta + (n-1)/n S gamma, pipelined in segments";
  static double seconds(const workload& w, const machine& m) {
    const double S = double(w.bytes), part = cost::share(w.ranks);
    return 2 * (w.ranks - 1) * m.alpha + 2 * part * S * m.beta + part * S * m.gamma;
  }
  template <class X, class A, class Op, class Compute>
  static void run(X& ex, std::span<const A> input, std::span<A> data, const Op& op, staging_hooks* hooks,
                  const Compute& compute) {
    collective::allreduce_by_ring(ex, input, data, op, {}, hooks, compute);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
