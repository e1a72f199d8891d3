// Binomial-tree reduce to a root: a rank whose relative number has bit k set
// sends its partial result 2^k down and stops; the others receive from 2^k
// up and combine.
//
// Cost: ceil(log2 n) (alpha + S beta + S gamma). Used by reduce and by the
// tree allreduce.
#pragma once

#include <chorus/collective/exchange.hpp>
#include <chorus/collective/scratch.hpp>
#include <chorus/collective/reduce_local.hpp>

#include <span>
#include <vector>

namespace chorus::collective {

template <class X, class A, class Op>
void reduce_tree(X& ex, std::span<A> data, int root, const Op& op, std::uint32_t first_step = 0) {
  const int n = ex.size();
  const int relative = (ex.rank() - root + n) % n;
  const auto real = [&](int r) { return (r + root) % n; };
  const std::span<A> scratch = collective::scratch<A>(data.size());
  std::uint32_t step = first_step;
  for (int mask = 1; mask < n; mask <<= 1, ++step) {
    if (relative & mask) {
      ex.send(std::span<const A>(data), real(relative - mask), step);
      return;
    }
    if (relative + mask < n) {
      ex.recv(scratch, real(relative + mask), step);
      // The sender holds higher relative ranks: it is the right operand.
      reduce_into(data, std::span<const A>(scratch), op, false);
    }
  }
}

}  // namespace chorus::collective
