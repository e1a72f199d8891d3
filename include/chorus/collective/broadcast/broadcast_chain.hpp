// Pipelined chain broadcast: ranks form a chain from the root; the message is
// cut into segments and each rank forwards segment k while segment k+1 is
// still arriving.
//
// Cost: (n - 2 + S/s) (alpha + s beta) for segment size s: close to S beta
// for large S, independent of n. Chosen for large messages.
#pragma once

#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::collective {

template <class X, class A>
void broadcast_by_chain(X& ex, std::span<A> data, int root, std::size_t segment_bytes = 512u << 10) {
  const int n = ex.size();
  if (n == 1 || data.empty()) return;
  const int relative = (ex.rank() - root + n) % n;
  const int previous = (ex.rank() - 1 + n) % n, next = (ex.rank() + 1) % n;
  std::size_t segment = std::max<std::size_t>(1, segment_bytes / sizeof(A));
  const std::size_t most_segments = static_cast<std::size_t>(ex.steps_left());  // one step per segment
  segment = std::max(segment, (data.size() + most_segments - 1) / most_segments);
  const std::size_t segments = (data.size() + segment - 1) / segment;
  const auto segment_steps = ex.phase(segments, "chain segments");
  const auto piece = [&](std::size_t k) {
    const std::size_t begin = k * segment;
    return data.subspan(begin, std::min(segment, data.size() - begin));
  };
  std::vector<typename X::request> arriving, sends;
  if (relative != 0)
    for (std::size_t k = 0; k < segments; ++k) arriving.push_back(ex.irecv(piece(k), previous, segment_steps(k)));
  for (std::size_t k = 0; k < segments; ++k) {
    if (relative != 0) ex.finish_receive(arriving[k], piece(k).size_bytes());
    if (relative != n - 1) sends.push_back(ex.isend(std::span<const A>(piece(k)), next, segment_steps(k)));
  }
  ex.wait_all(sends);
}

namespace algorithms {
struct broadcast_chain {
  static constexpr algorithm id = algorithm::chain;
  static constexpr std::string_view cost = "(n - 2 + S/s) (alpha + s beta), segments of s bytes";
  static double seconds(const workload& w, const machine& m) {
    const double s = 512u << 10, segments = std::max(1.0, double(w.bytes) / s);
    return (std::max(w.ranks - 2, 0) + segments) * (m.alpha + std::min(s, double(w.bytes)) * m.beta);
  }
  template <class X, class A>
  static void run(X& ex, std::span<A> data, int root) {
    collective::broadcast_by_chain(ex, data, root);
  }
};
}  // namespace algorithms

}  // namespace chorus::collective
