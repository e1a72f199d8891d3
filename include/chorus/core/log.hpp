// Debug log lines, on stderr, when CHORUS_DEBUG=1. Used to say what chorus
// chose (progress mode, algorithm) so that no choice is silent.
#pragma once

#include <chorus/core/env.hpp>

#include <cstdio>
#include <string_view>

namespace chorus::log {

inline bool debug_enabled() {
  static const bool enabled = env::get_integer("CHORUS_DEBUG", 0, 1).value_or(0) == 1;
  return enabled;
}

inline void debug(int rank, std::string_view message) {
  if (!debug_enabled()) return;
  std::fprintf(stderr, "chorus[%d]: %.*s\n", rank, static_cast<int>(message.size()), message.data());
}

// Something a user should know even without CHORUS_DEBUG (a store that
// could not accept a connection, say); rare by construction.
inline void warn(int rank, std::string_view message) {
  std::fprintf(stderr, "chorus[%d] warning: %.*s\n", rank, static_cast<int>(message.size()), message.data());
}

}  // namespace chorus::log
