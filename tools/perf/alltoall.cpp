// alltoall: block j of rank i's input becomes block i of rank j's output.
// size = n * count * sizeof(T) (either buffer); busbw = algbw * (n-1)/n.
#include "collective.hpp"

#include <chorus/collective/alltoall/alltoall.hpp>

namespace perf {
namespace {

struct alltoall {
  static constexpr std::string_view name = "alltoall";
  static constexpr bool reduces = false, in_place = false;

  double bus_factor(int n) const { return (n - 1.0) / n; }
  layout shape(std::size_t elements, int n) const {
    const layout blocks = blocks_in(elements, n);
    return {blocks.count, blocks.output, blocks.output};
  }

  template <class T, class Op>
  chorus::algorithm call(const context& c, buffers<T>& b, form, Op) const {
    return c.on([&](auto& comm) { return chorus::alltoall(comm, b.in(), b.out()); });
  }

  template <class T, class Op>
  std::uint64_t wrong(const context& c, const buffers<T>& b, form f, Op) const {
    const std::size_t block = b.shape.count, mine = static_cast<std::size_t>(c.rank) * block;
    return count_wrong(b.result(f), b.shape.output, [&](std::size_t i) {
      return input_at<T>(c.config, static_cast<int>(i / block), mine + i % block);
    });
  }
};

}  // namespace

const collective alltoall_entry = describe<alltoall>();

}  // namespace perf
