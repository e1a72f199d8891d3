// State a rank keeps across a call's waits: the algorithms' scratch
// buffers, the flight recorder's current call, the memory router's stream,
// the last error's text, the traffic counters.
//
// A rank of a real job is a process, or a thread of one (run_threads), so
// by default this state is the thread's: rank_local<T, Tag>() is a
// thread_local T, one per Tag. A simulation runs many ranks as coroutines
// on one thread (sim/run.hpp): a rank's wait switches to another rank on
// the same thread, which would overwrite the first rank's buffers. It
// installs a source (install_rank_state_source) that returns the running
// rank's own rank_state, and each rank then keeps its own values.
//
//   inline std::string& latest_error() {
//     struct tag;
//     return rank_local<std::string, tag>();
//   }
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <vector>

namespace chorus {

// One rank's values, by the (T, Tag) pair that names each, made
// (value-initialised) on first use.
class rank_state {
 public:
  template <class T, class Tag>
  T& get() {
    const std::size_t index = slot<T, Tag>();
    if (index >= values_.size()) values_.resize(index + 1);
    std::shared_ptr<void>& value = values_[index];
    if (!value) value = std::make_shared<T>();
    return *static_cast<T*>(value.get());
  }

 private:
  static std::size_t next_slot() noexcept {
    static std::atomic<std::size_t> next{0};
    return next.fetch_add(1, std::memory_order_relaxed);
  }
  template <class T, class Tag>
  static std::size_t slot() noexcept {
    static const std::size_t index = next_slot();
    return index;
  }

  std::vector<std::shared_ptr<void>> values_;  // by slot; shared_ptr<void> destroys each as its T
};

// Where the running rank's state is; null from a thread no simulated rank
// runs on (then the thread's own is used).
using rank_state_source = rank_state* (*)() noexcept;

namespace detail {
inline std::atomic<rank_state_source>& installed_rank_state_source() noexcept {
  static std::atomic<rank_state_source> source{nullptr};
  return source;
}
}  // namespace detail

// Installs `source` (nullptr: back to the thread's); returns the one it replaces.
inline rank_state_source install_rank_state_source(rank_state_source source) noexcept {
  return detail::installed_rank_state_source().exchange(source, std::memory_order_acq_rel);
}

template <class T, class Tag = T>
T& rank_local() {
  if (const rank_state_source source = detail::installed_rank_state_source().load(std::memory_order_acquire))
    if (rank_state* const state = source()) return state->get<T, Tag>();
  thread_local T value{};
  return value;
}

}  // namespace chorus
