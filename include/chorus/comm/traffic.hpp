// Bytes and messages this thread has handed to the network through any
// communicator, to other ranks (a message to itself, as a parameter
// server's worker pushing to its own shard, moves nothing): what averaging
// schemes report as their cost. Counted per
// thread so that a scheme measures its own calls (a delta around them) even
// while a progress thread or another rank-thread of the process sends too.
#pragma once

#include <chorus/core/rank_local.hpp>

#include <cstdint>

namespace chorus {

struct traffic {
  std::uint64_t bytes_sent = 0;
  std::uint64_t messages_sent = 0;

  traffic& operator+=(const traffic& other) noexcept {
    bytes_sent += other.bytes_sent;
    messages_sent += other.messages_sent;
    return *this;
  }
  friend traffic operator-(traffic a, const traffic& b) noexcept {
    return {a.bytes_sent - b.bytes_sent, a.messages_sent - b.messages_sent};
  }
};

inline traffic& this_thread_traffic() noexcept { return rank_local<traffic>(); }

}  // namespace chorus
