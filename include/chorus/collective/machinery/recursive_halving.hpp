// The recursive-halving reduce-scatter pattern over p = 2^k participants and
// its mirror, the recursive-doubling allgather, shared by Rabenseifner's
// allreduce and the halving reduce_scatter.
//
// The buffer is cut into p super-blocks: `bounds(i)` is where super-block i
// starts, bounds(p) the end. A function, not a table: a table costs every
// rank 8 (p + 1) bytes per call, 512 KiB at 65,536 ranks. Halving:
// with distance d = p/2, p/4, ..., 1 each participant keeps the half of its
// current range on its side of the partner (participant ^ d), sends the
// other half, and reduces what the partner sends for the kept half; it ends
// owning super-block `participant`, fully reduced. Doubling: the reverse,
// exchanging owned ranges until everyone has everything.
//
// Cost (each): log2(p) alpha + (p-1)/p S beta (+ the same in gamma for halving).
#pragma once

#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/fold.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/record/trace.hpp>

#include <cstddef>
#include <span>

namespace chorus::collective {

// `mine`: this participant's contribution (folded(), in place `data`),
// read where it is by the first round, which writes what it keeps into
// `data`; the later rounds work in `data`.
template <class X, class A, class Bounds, class Op, class Compute = host_compute>
void halving_reduce_scatter(X& ex, const folding& shape, std::span<const A> mine, std::span<A> data,
                            std::span<A> scratch, const Bounds& bounds, const Op& op, const Compute& compute = {}) {
  int low = 0, high = shape.participants;
  const auto rounds = ex.phase(shape.rounds(), "halving");
  std::uint32_t round = 0;
  for (int distance = shape.participants / 2; distance >= 1; distance /= 2, ++round) {
    const record::phase phase("halving round");
    const int partner = shape.rank_of(shape.participant ^ distance);
    const int middle = low + distance;
    const bool upper = (shape.participant & distance) != 0;
    const int keep_low = upper ? middle : low, keep_high = upper ? high : middle;
    const int send_low = upper ? low : middle, send_high = upper ? middle : high;
    const auto range = [&]<class B>(std::span<B> of, int first, int last) {
      return of.subspan(bounds(first), bounds(last) - bounds(first));
    };
    const std::span<A> kept = range(data, keep_low, keep_high);
    const std::span<A> incoming = scratch.first(kept.size());
    ex.sendrecv(range(mine, send_low, send_high), partner, incoming, partner, rounds(round));
    compute.reduce(kept, range(mine, keep_low, keep_high), std::span<const A>(incoming), op, partner < ex.rank());
    compute.settle();  // the next round sends part of `kept` and reuses `incoming`
    mine = data;
    low = keep_low;
    high = keep_high;
  }
}

template <class X, class A, class Bounds>
void doubling_allgather(X& ex, const folding& shape, std::span<A> data, const Bounds& bounds) {
  const auto rounds = ex.phase(shape.rounds(), "doubling");
  std::uint32_t round = 0;
  for (int distance = 1; distance < shape.participants; distance *= 2, ++round) {
    const record::phase phase("doubling round");
    const int partner_number = shape.participant ^ distance;
    const int mine = shape.participant & ~(distance - 1), theirs = partner_number & ~(distance - 1);
    const auto range = [&](int from) {
      const std::size_t begin = bounds(from);
      return data.subspan(begin, bounds(from + distance) - begin);
    };
    ex.sendrecv(std::span<const A>(range(mine)), shape.rank_of(partner_number), range(theirs),
                shape.rank_of(partner_number), rounds(round));
  }
}

}  // namespace chorus::collective
