// broadcast: every rank ends with the root's buffer.
// size = count * sizeof(T); busbw = algbw.
#include "collective.hpp"

#include <chorus/collective/broadcast/broadcast.hpp>

namespace perf {
namespace {

struct broadcast {
  static constexpr std::string_view name = "broadcast";
  static constexpr bool reduces = false, in_place = true;

  double bus_factor(int) const { return 1; }
  layout shape(std::size_t elements, int) const { return {elements, elements, elements}; }

  // Out of place: the root's input is copied to its output first (the call
  // itself takes one buffer).
  template <class T, class Op>
  chorus::algorithm call(const context& c, buffers<T>& b, form f, Op) const {
    if (f == form::in_place)
      return c.on([&](auto& comm) {
        return chorus::broadcast(comm, b.in_place(b.shape.count), c.config.root, c.config.algorithm);
      });
    if (c.rank == c.config.root) b.copy_input_to_output();
    return c.on([&](auto& comm) { return chorus::broadcast(comm, b.out(), c.config.root, c.config.algorithm); });
  }

  template <class T, class Op>
  std::uint64_t wrong(const context& c, const buffers<T>& b, form f, Op) const {
    return count_wrong(b.result(f), b.shape.count,
                       [&](std::size_t i) { return input_at<T>(c.config, c.config.root, i); });
  }
};

}  // namespace

const collective broadcast_entry = describe<broadcast>();

}  // namespace perf
