// Folding a non-power-of-two group into p = 2^floor(log2 n) participants, the
// pattern recursive doubling, Rabenseifner and recursive halving share.
//
// With rem = n - p, ranks 0..2rem-1 pair up: the even rank of each pair
// hands its data to the odd one (which reduces it) and sits out; the odd
// rank takes participant number r/2. Ranks from 2rem on take r - rem. At the
// end the odd ranks hand the result back. Cost: 2 (alpha + S beta) extra on
// the folded ranks, none when n is a power of two.
#pragma once

#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/local_compute.hpp>

#include <cstdint>
#include <span>

namespace chorus::collective {

struct folding {
  int size = 1;          // n
  int participants = 1;  // p
  int remainder = 0;     // n - p
  int participant = 0;   // this rank's number among the p, or -1 if it sits out
  bool paired = false;   // one of ranks 0..2rem-1, which fold in and out

  explicit folding(int n, int rank) : size(n) {
    while (participants * 2 <= n) participants *= 2;
    remainder = n - participants;
    paired = rank < 2 * remainder;
    if (paired)
      participant = rank % 2 == 0 ? -1 : rank / 2;
    else
      participant = rank - remainder;
  }

  // The real rank of participant i.
  int rank_of(int i) const noexcept { return i < remainder ? 2 * i + 1 : i + remainder; }
  // Rounds of halving or doubling among the participants: log2(p).
  std::uint32_t rounds() const noexcept {
    std::uint32_t count = 0;
    for (int p = participants; p > 1; p /= 2) ++count;
    return count;
  }
  bool sits_out() const noexcept { return participant < 0; }
};

// Even ranks of the folded pairs send their contribution, `input`; odd
// ones receive it into `scratch` and combine it with theirs into `data`
// (the even rank is the lower operand). `input` is `data` in place.
template <class X, class A, class Op, class Compute = host_compute>
void fold_in(X& ex, const folding& shape, std::span<const A> input, std::span<A> data, std::span<A> scratch,
             const Op& op, std::uint32_t step, const Compute& compute = {}) {
  if (!shape.paired) return;
  const int rank = ex.rank();
  if (shape.sits_out()) {
    ex.send(input, rank + 1, step);
  } else {
    ex.recv(scratch.first(data.size()), rank - 1, step);
    compute.reduce(data, input, std::span<const A>(scratch.first(data.size())), op, true);
    compute.settle();  // the transport reads `data` next
  }
}

// The odd ranks give the finished `data` back to their even partners.
template <class X, class A>
void fold_out(X& ex, const folding& shape, std::span<A> data, std::uint32_t step) {
  if (!shape.paired) return;
  const int rank = ex.rank();
  if (shape.sits_out())
    ex.recv(data, rank + 1, step);
  else
    ex.send(std::span<const A>(data), rank - 1, step);
}

// Runs `participate(shape, mine)` between folding in and folding out: the
// skeleton of every algorithm built on p = 2^k participants. `mine` is
// this participant's contribution so far: `data` where it folded its
// partner's in, else still `input` (`data` in place), which its first
// round reads where it is. The fold phases are reserved first, so the
// ranks that sit out (and reserve no more) agree with the participants on
// their steps. `compute` says where the reductions run (local_compute.hpp).
template <class X, class A, class Op, class Participate, class Compute = host_compute>
void folded(X& ex, std::span<const A> input, std::span<A> data, std::span<A> scratch, const Op& op,
            Participate&& participate, const Compute& compute = {}) {
  const folding shape(ex.size(), ex.rank());
  const auto in = ex.phase(1, "fold in"), out = ex.phase(1, "fold out");
  fold_in(ex, shape, input, data, scratch, op, in(0), compute);
  if (!shape.sits_out()) participate(shape, shape.paired ? std::span<const A>(data) : input);
  fold_out(ex, shape, data, out(0));
}

}  // namespace chorus::collective
