// sendrecv (nccl-tests' sendrecv_perf): every rank sends its buffer to the
// next rank and receives the previous rank's, all at once: point-to-point
// bandwidth with every link busy in one direction.
// size = count * sizeof(T); busbw = algbw.
#include "collective.hpp"

#include <array>

namespace perf {
namespace {

struct sendrecv {
  static constexpr std::string_view name = "sendrecv";
  static constexpr bool reduces = false, in_place = false;

  double bus_factor(int) const { return 1; }
  layout shape(std::size_t elements, int) const { return {elements, elements, elements}; }

  template <class T, class Op>
  chorus::algorithm call(const context& c, buffers<T>& b, form, Op) const {
    const int next = (c.rank + 1) % c.ranks, previous = (c.rank + c.ranks - 1) % c.ranks;
    c.on([&](auto& comm) {
      std::array both{comm.irecv(b.out(), previous), comm.isend(b.in(), next)};
      comm.wait_all(both);
    });
    return chorus::algorithm::automatic;  // one algorithm: nothing to report
  }

  template <class T, class Op>
  std::uint64_t wrong(const context& c, const buffers<T>& b, form f, Op) const {
    const int previous = (c.rank + c.ranks - 1) % c.ranks;
    return count_wrong(b.result(f), b.shape.count, [&](std::size_t i) { return input_at<T>(c.config, previous, i); });
  }
};

}  // namespace

const collective sendrecv_entry = describe<sendrecv>();

}  // namespace perf
