// scatter: rank r ends with block r of the root's input.
// size = n * count * sizeof(T) (the root's input); busbw = algbw.
#include "collective.hpp"

#include <chorus/collective/scatter/scatter.hpp>

namespace perf {
namespace {

struct scatter {
  static constexpr std::string_view name = "scatter";
  static constexpr bool reduces = false, in_place = false;

  double bus_factor(int) const { return 1; }
  layout shape(std::size_t elements, int n) const { return blocks_out(elements, n); }

  template <class T, class Op>
  chorus::algorithm call(const context& c, buffers<T>& b, form, Op) const {
    c.on([&](auto& comm) { chorus::scatter(comm, b.in(), b.out(), c.config.root); });
    return chorus::algorithm::automatic;  // one algorithm: nothing to report
  }

  template <class T, class Op>
  std::uint64_t wrong(const context& c, const buffers<T>& b, form f, Op) const {
    const std::size_t first = static_cast<std::size_t>(c.rank) * b.shape.count;
    return count_wrong(b.result(f), b.shape.count,
                       [&](std::size_t i) { return input_at<T>(c.config, c.config.root, first + i); });
  }
};

}  // namespace

const collective scatter_entry = describe<scatter>();

}  // namespace perf
