// Wire tags of a communicator: (communicator id, sequence, step).
//
// Every collective call takes a fresh sequence number (all ranks call
// collectives in the same order, so they agree on it without talking), and
// each message inside the call has its own step. Two operations in flight on
// one communicator, or on two communicators sharing a transport, therefore
// never match each other's messages. Sequence 0 is reserved for user
// point-to-point traffic, whose step is the user's tag.
//
//   bits 43..32 communicator id | 31..16 sequence | 15..0 step
#pragma once

#include <chorus/transport/transport.hpp>

#include <cstdint>

namespace chorus::tag {

inline constexpr int id_bits = 12;
inline constexpr int sequence_bits = 16;
inline constexpr int step_bits = 16;
static_assert(id_bits + sequence_bits + step_bits <= transport::user_tag_bits);

inline constexpr std::uint32_t max_id = (1u << id_bits) - 1;
inline constexpr std::uint32_t max_step = (1u << step_bits) - 1;
inline constexpr std::uint32_t sequence_modulus = 1u << sequence_bits;
inline constexpr std::uint32_t point_to_point = 0;

constexpr transport::tag_t make(std::uint32_t id, std::uint32_t sequence, std::uint32_t step) noexcept {
  return (static_cast<transport::tag_t>(id & max_id) << (sequence_bits + step_bits)) |
         (static_cast<transport::tag_t>(sequence & (sequence_modulus - 1)) << step_bits) |
         (step & max_step);
}

// The sequence after `sequence`, skipping the point-to-point value 0.
constexpr std::uint32_t next_sequence(std::uint32_t sequence) noexcept {
  const std::uint32_t next = (sequence + 1) % sequence_modulus;
  return next == point_to_point ? 1 : next;
}

}  // namespace chorus::tag
