// reduce: the root ends with the reduction of all inputs.
// size = count * sizeof(T); busbw = algbw.
#include "collective.hpp"

#include <chorus/collective/reduce/reduce.hpp>

namespace perf {
namespace {

struct reduce {
  static constexpr std::string_view name = "reduce";
  static constexpr bool reduces = true, in_place = true;

  double bus_factor(int) const { return 1; }
  layout shape(std::size_t elements, int) const { return {elements, elements, elements}; }

  template <class T, class Op>
  chorus::algorithm call(const context& c, buffers<T>& b, form f, Op op) const {
    if (f == form::in_place)
      return c.on([&](auto& comm) { return chorus::reduce(comm, b.in_place(b.shape.count), c.config.root, op); });
    return c.on([&](auto& comm) { return chorus::reduce(comm, b.in(), b.out(), c.config.root, op); });
  }

  template <class T, class Op>
  std::uint64_t wrong(const context& c, const buffers<T>& b, form f, Op op) const {
    if (c.rank != c.config.root) return 0;  // only the root's output is defined
    return count_wrong(b.result(f), b.shape.count, [&](std::size_t i) { return expected_reduction<T>(c, i, op); });
  }
};

}  // namespace

const collective reduce_entry = describe<reduce>();

}  // namespace perf
