// The CHORUS_DEBUG=1 line each collective prints about its choice.
#pragma once

#include <chorus/core/algorithm.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/log.hpp>

#include <string>
#include <string_view>

namespace chorus::collective {

template <class Communicator>
void report(const Communicator& comm, std::string_view operation, std::size_t bytes, dtype type,
            algorithm chosen, std::string_view reason) {
  if (!log::debug_enabled()) return;
  log::debug(comm.transport().rank(),
             std::string(operation) + " of " + std::to_string(bytes) + " B " + std::string(to_string(type)) +
                 " over " + std::to_string(comm.size()) + " ranks: " + std::string(to_string(chosen)) + " (" +
                 std::string(reason) + ")");
}

// A caller's forced choice, checked against what the collective offers.
inline algorithm pick(algorithm forced, algorithm automatic_choice, std::initializer_list<algorithm> offered,
                      std::string_view operation) {
  if (forced == algorithm::automatic) return automatic_choice;
  for (algorithm a : offered)
    if (a == forced) return forced;
  throw error(errc::invalid_argument,
              std::string(to_string(forced)) + " is not an algorithm of " + std::string(operation));
}

}  // namespace chorus::collective
