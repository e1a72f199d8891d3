// Wire tags of a communicator: (communicator id, sequence, step).
//
// Every collective call takes a fresh sequence number (all ranks call
// collectives in the same order, so they agree on it without talking), and
// each message inside the call has its own step. Two operations in flight on
// one communicator, or on two communicators sharing a transport, therefore
// never match each other's messages. Sequence 0 is reserved for user
// point-to-point traffic, whose step is the user's tag.
//
//   bits 46..35 communicator id | 34..19 sequence | 18..0 step
//
// The field sizes are the limits: 4,096 communicators alive at once, 65,536
// calls in flight on one before a sequence repeats, and 524,288 steps per
// call: a pipelined ring allreduce (2 (n - 1) hops x segments) at the
// transport's 131,072 ranks still has two segments, and at 65,536 ranks four
// (the ring caps its segments at what fits: ring_geometry.hpp).
//
// Within a call, each phase of an algorithm (fold in, halving, a ring's
// hops x segments, ...) reserves its own range of steps, in an order every
// rank follows (collective/machinery/exchange.hpp: `ex.phase(count, name)`), so two
// phases never share a step whatever the rank count, and a call that needs
// more steps than the field holds is an error, not a silent collision.
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/transport/transport.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace chorus::tag {

inline constexpr int id_bits = 12;
inline constexpr int sequence_bits = 16;
inline constexpr int step_bits = 19;
static_assert(id_bits + sequence_bits + step_bits <= transport::user_tag_bits);

inline constexpr std::uint32_t max_id = (1u << id_bits) - 1;
inline constexpr std::uint32_t max_step = (1u << step_bits) - 1;

// The id `index` places after the job counter's value `first`: 1 to max_id,
// wrapping (0 is the world's).
inline constexpr std::uint32_t id_after(std::uint32_t first, std::uint32_t index) {
  return (first + index) % max_id + 1;
}
inline constexpr std::uint32_t sequence_modulus = 1u << sequence_bits;
inline constexpr std::uint32_t point_to_point = 0;
// A ring allreduce over every rank the transport can hold fits with two segments.
static_assert(std::uint64_t{max_step} + 1 >= 4 * std::uint64_t{transport::max_ranks});

constexpr transport::tag_t make(std::uint32_t id, std::uint32_t sequence, std::uint32_t step) noexcept {
  return (static_cast<transport::tag_t>(id & max_id) << (sequence_bits + step_bits)) |
         (static_cast<transport::tag_t>(sequence & (sequence_modulus - 1)) << step_bits) | (step & max_step);
}

// The steps one phase of a call owns: `first`, ..., `first + count - 1`.
struct phase {
  std::uint32_t first = 0;
  std::uint32_t count = 0;
  std::string_view name;

  // The phase's i-th step. Past the end is a bug in the algorithm, which
  // reserved too few: better an error than a step of the next phase.
  std::uint32_t operator()(std::uint64_t i) const;
};

// Hands out consecutive step ranges; the caller checks fits() first.
class step_ranges {
 public:
  // Whether `count` more steps fit in the field.
  bool fits(std::uint64_t count) const noexcept { return next_ + count <= std::uint64_t{max_step} + 1; }
  phase reserve(std::uint32_t count, std::string_view name) noexcept {
    const phase reserved{static_cast<std::uint32_t>(next_), count, name};
    next_ += count;
    return reserved;
  }
  std::uint64_t used() const noexcept { return next_; }

 private:
  std::uint64_t next_ = 0;
};

// The sequence after `sequence`, skipping the point-to-point value 0.
constexpr std::uint32_t next_sequence(std::uint32_t sequence) noexcept {
  const std::uint32_t next = (sequence + 1) % sequence_modulus;
  return next == point_to_point ? 1 : next;
}

inline std::uint32_t phase::operator()(std::uint64_t i) const {
  if (i >= count)
    throw error(errc::invalid_argument, "step " + std::to_string(i) + " is outside phase '" + std::string(name) +
                                            "', which reserved " + std::to_string(count) + " (a bug in the algorithm)");
  return first + static_cast<std::uint32_t>(i);
}

}  // namespace chorus::tag
