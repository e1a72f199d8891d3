// allgather: every rank ends with all ranks' blocks, in rank order.
// size = n * count * sizeof(T) (the gathered output); busbw = algbw * (n-1)/n.
#include "collective.hpp"

#include <chorus/collective/allgather/allgather.hpp>

namespace perf {
namespace {

struct allgather {
  static constexpr std::string_view name = "allgather";
  static constexpr bool reduces = false, in_place = true;

  double bus_factor(int n) const { return (n - 1.0) / n; }
  layout shape(std::size_t elements, int n) const { return blocks_in(elements, n); }

  // In place, each rank's own block is already at rank * count of the whole
  // buffer (fill() puts every rank's input index i at i).
  template <class T, class Op>
  chorus::algorithm call(const context& c, buffers<T>& b, form f, Op) const {
    if (f == form::in_place)
      return c.on([&](auto& comm) { return chorus::allgather(comm, b.in_place(b.shape.output), c.config.algorithm); });
    return c.on([&](auto& comm) { return chorus::allgather(comm, b.in(), b.out(), c.config.algorithm); });
  }

  template <class T, class Op>
  std::uint64_t wrong(const context& c, const buffers<T>& b, form f, Op) const {
    const std::size_t block = b.shape.count;
    return count_wrong(b.result(f), b.shape.output, [&](std::size_t i) {
      const int from = static_cast<int>(i / block);
      return input_at<T>(c.config, from, f == form::in_place ? i : i % block);
    });
  }
};

}  // namespace

const collective allgather_entry = describe<allgather>();

}  // namespace perf
