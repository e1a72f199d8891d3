// gather: the root ends with all ranks' blocks, in rank order.
// size = n * count * sizeof(T) (the gathered output); busbw = algbw.
#include "collective.hpp"

#include <chorus/collective/gather/gather.hpp>

namespace perf {
namespace {

struct gather {
  static constexpr std::string_view name = "gather";
  static constexpr bool reduces = false, in_place = false;

  double bus_factor(int) const { return 1; }
  layout shape(std::size_t elements, int n) const { return blocks_in(elements, n); }

  template <class T, class Op>
  chorus::algorithm call(const context& c, buffers<T>& b, form, Op) const {
    c.on([&](auto& comm) { chorus::gather(comm, b.in(), b.out(), c.config.root); });
    return chorus::algorithm::automatic;  // one algorithm: nothing to report
  }

  template <class T, class Op>
  std::uint64_t wrong(const context& c, const buffers<T>& b, form f, Op) const {
    if (c.rank != c.config.root) return 0;
    const std::size_t block = b.shape.count;
    return count_wrong(b.result(f), b.shape.output,
                       [&](std::size_t i) { return input_at<T>(c.config, static_cast<int>(i / block), i % block); });
  }
};

}  // namespace

const collective gather_entry = describe<gather>();

}  // namespace perf
