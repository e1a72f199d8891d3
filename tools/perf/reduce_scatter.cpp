// reduce_scatter: rank r ends with block r of the reduction of all inputs.
// size = n * count * sizeof(T) (the full input); busbw = algbw * (n-1)/n.
#include "collective.hpp"

#include <chorus/collective/reduce_scatter/reduce_scatter.hpp>

namespace perf {
namespace {

struct reduce_scatter {
  static constexpr std::string_view name = "reduce_scatter";
  static constexpr bool reduces = true, in_place = false;

  double bus_factor(int n) const { return (n - 1.0) / n; }
  layout shape(std::size_t elements, int n) const { return blocks_out(elements, n); }

  template <class T, class Op>
  chorus::algorithm call(const context& c, buffers<T>& b, form, Op op) const {
    return c.on([&](auto& comm) { return chorus::reduce_scatter(comm, b.in(), b.out(), op, c.config.algorithm); });
  }

  template <class T, class Op>
  std::uint64_t wrong(const context& c, const buffers<T>& b, form f, Op op) const {
    const std::size_t first = static_cast<std::size_t>(c.rank) * b.shape.count;
    return count_wrong(b.result(f), b.shape.count,
                       [&](std::size_t i) { return expected_reduction<T>(c, first + i, op); });
  }
};

}  // namespace

const collective reduce_scatter_entry = describe<reduce_scatter>();

}  // namespace perf
