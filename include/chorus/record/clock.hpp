// The flight recorder's clock: the processor's time-stamp counter where it
// has one (x86-64: about 10 ns a read, against about 25 for steady_clock),
// else steady_clock. A recorded call reads it twice, so the clock is most
// of what recording costs. Ticks become wall-clock nanoseconds only when a
// record is written out: an anchor taken when the record began (ticks,
// steady and system time) and one taken then give the tick rate.
#pragma once

#include <chrono>
#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

namespace chorus::record {

inline std::uint64_t ticks() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  return __rdtsc();
#else
  return static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
#endif
}

// One reading of the three clocks, close together.
struct clock_anchor {
  std::uint64_t ticks = 0;
  std::int64_t steady_ns = 0;
  std::int64_t unix_ns = 0;

  static clock_anchor now() noexcept {
    using namespace std::chrono;
    clock_anchor anchor;
    anchor.steady_ns = duration_cast<nanoseconds>(steady_clock::now().time_since_epoch()).count();
    anchor.ticks = record::ticks();
    anchor.unix_ns = duration_cast<nanoseconds>(system_clock::now().time_since_epoch()).count();
    return anchor;
  }
};

// Ticks to Unix-epoch nanoseconds, from the anchor at the record's start
// and one taken now. Under a millisecond apart, the rate is not trusted and
// the conversion waits until a millisecond has passed.
class tick_converter {
 public:
  explicit tick_converter(const clock_anchor& start) : start_(start) {
    clock_anchor end = clock_anchor::now();
    while (end.steady_ns - start.steady_ns < 1'000'000) end = clock_anchor::now();
    ns_per_tick_ = static_cast<double>(end.steady_ns - start.steady_ns) / static_cast<double>(end.ticks - start.ticks);
  }

  // 0 stays 0 (not yet happened).
  std::int64_t unix_ns(std::uint64_t at) const noexcept {
    if (at == 0) return 0;
    const double since = static_cast<double>(static_cast<std::int64_t>(at - start_.ticks)) * ns_per_tick_;
    return start_.unix_ns + static_cast<std::int64_t>(since);
  }
  double ns_per_tick() const noexcept { return ns_per_tick_; }

 private:
  clock_anchor start_;
  double ns_per_tick_ = 1.0;
};

}  // namespace chorus::record
