// allreduce: every rank ends with the reduction of all inputs.
// size = count * sizeof(T); busbw = algbw * 2(n-1)/n.
#include "collective.hpp"

#include <chorus/collective/allreduce/allreduce.hpp>

namespace perf {
namespace {

struct allreduce {
  static constexpr std::string_view name = "allreduce";
  static constexpr bool reduces = true, in_place = true;

  double bus_factor(int n) const { return 2.0 * (n - 1) / n; }
  layout shape(std::size_t elements, int) const { return {elements, elements, elements}; }

  template <class T, class Op>
  chorus::algorithm call(const context& c, buffers<T>& b, form f, Op op) const {
    if (f == form::in_place)
      return c.on(
          [&](auto& comm) { return chorus::allreduce(comm, b.in_place(b.shape.count), op, c.config.algorithm); });
    return c.on([&](auto& comm) { return chorus::allreduce(comm, b.in(), b.out(), op, c.config.algorithm); });
  }

  template <class T, class Op>
  std::uint64_t wrong(const context& c, const buffers<T>& b, form f, Op op) const {
    return count_wrong(b.result(f), b.shape.count, [&](std::size_t i) { return expected_reduction<T>(c, i, op); });
  }
};

}  // namespace

const collective allreduce_entry = describe<allreduce>();

}  // namespace perf
