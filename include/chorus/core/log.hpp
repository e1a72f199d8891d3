// Debug log lines, on stderr, when CHORUS_DEBUG=1. Used to say what chorus
// chose (progress mode, algorithm) so that no choice is silent. A program
// can route the lines elsewhere (its own logger, a test's check) with
// log::set_sink, and turn them on or off in code with log::set_debug.
#pragma once

#include <chorus/core/env.hpp>

#include <atomic>
#include <cstdio>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace chorus::log {

// Receives every line with the rank that wrote it (a warning's begins
// "warning: ").
using sink = std::function<void(int rank, std::string_view line)>;

namespace detail {
inline std::atomic<int> debug_setting{-1};  // -1: as CHORUS_DEBUG says
struct sink_slot {
  std::mutex lock;
  sink to;  // empty: stderr
};
inline sink_slot& current_sink() {
  static sink_slot slot;
  return slot;
}
inline void write(int rank, std::string_view message) {
  sink_slot& slot = current_sink();
  std::lock_guard<std::mutex> hold(slot.lock);
  if (slot.to) return slot.to(rank, message);
  std::fprintf(stderr, "chorus[%d]: %.*s\n", rank, static_cast<int>(message.size()), message.data());
}
}  // namespace detail

inline bool debug_enabled() {
  if (const int set = detail::debug_setting.load(std::memory_order_relaxed); set >= 0) return set == 1;
  static const bool enabled = env::get_integer("CHORUS_DEBUG", 0, 1).value_or(0) == 1;
  return enabled;
}

// Debug lines on or off in code, whatever CHORUS_DEBUG says.
inline void set_debug(bool on) { detail::debug_setting.store(on ? 1 : 0, std::memory_order_relaxed); }

// Where the lines go from now on; an empty sink restores stderr. Lines are
// written one at a time (the sink need not lock).
inline void set_sink(sink to) {
  detail::sink_slot& slot = detail::current_sink();
  std::lock_guard<std::mutex> hold(slot.lock);
  slot.to = std::move(to);
}

inline void debug(int rank, std::string_view message) {
  if (!debug_enabled()) return;
  detail::write(rank, message);
}

// Something a user should know even without CHORUS_DEBUG (a store that
// could not accept a connection, say); rare by construction.
inline void warn(int rank, std::string_view message) { detail::write(rank, "warning: " + std::string(message)); }

}  // namespace chorus::log
