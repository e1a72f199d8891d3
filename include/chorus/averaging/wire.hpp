// The one message format of the asynchronous schemes (GoSGD, async EASGD,
// and any new one): a fixed header, then the payload, in one buffer.
//
//   kind | sequence | value (a weight, or a step) | payload bytes | payload
//
// The header makes each scheme's protocol invariants checked facts: a
// message of an unexpected kind, a payload of the wrong size, a sequence
// number out of order (a lost or reordered message, or a peer running
// another scheme on the same communicator), or a value that is not what
// its kind carries (a weight that is not positive and finite, a count or a
// rank that is not a whole number in range) is a chorus::error naming the
// peer, instead of a silently wrong model. tests/fuzz/scheme_fuzz.cpp
// feeds the readers arbitrary bytes.
#pragma once

#include <chorus/core/error.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::averaging::wire {

enum class kind : std::uint32_t {
  push = 1,     // a model sent unasked (gossip)
  cut = 2,      // no more pushes before this point (quiescence)
  pull = 3,     // a model sent for an answer (elastic pull)
  reply = 4,    // the answer to a pull
  done = 5,     // the sender sends no more
  leaving = 6,  // the sender leaves the job: push nothing more to it, answer with an ack
  ack = 7,      // the answer to a leaving
  joined = 8,   // a process joined the group (value: its transport rank): admit it and gossip with it
};

constexpr std::string_view to_string(kind what) noexcept {
  switch (what) {
    case kind::push: return "push";
    case kind::cut: return "cut";
    case kind::pull: return "pull";
    case kind::reply: return "reply";
    case kind::done: return "done";
    case kind::leaving: return "leaving";
    case kind::ack: return "ack";
    case kind::joined: return "joined";
  }
  return "unknown";
}

struct header {
  kind what{};
  std::uint32_t reserved = 0;
  std::uint64_t sequence = 0;       // per sender and receiver, from 1 (the scheme says what counts)
  double value = 0.0;               // the scheme's number: a gossip weight, a step
  std::uint64_t payload_bytes = 0;  // what follows the header
};
static_assert(sizeof(header) == 32, "the header is part of the wire format");

// Who reads a message, for its errors: world ranks and the scheme's operation.
struct reader {
  int rank = -1;
  int peer = -1;
  std::string_view operation;

  [[noreturn]] void fail(const std::string& what) const {
    throw error(errc::mismatch, what, {rank, peer, std::string(operation)});
  }
};

// Whether a kind carries the scheme's payload (the others are a header alone).
constexpr bool carries_payload(kind what) noexcept {
  return what != kind::cut && what != kind::done && what != kind::leaving && what != kind::ack && what != kind::joined;
}

// A header and room for a payload of up to `capacity` bytes.
class message {
 public:
  explicit message(std::size_t capacity = 0) : bytes_(sizeof(header) + capacity) {}

  std::size_t capacity() const noexcept { return bytes_.size() - sizeof(header); }
  // The whole buffer, to receive into.
  std::span<std::byte> buffer() noexcept { return bytes_; }
  // The payload area (the full capacity; write it, then call write()).
  std::span<std::byte> payload() noexcept { return std::span(bytes_).subspan(sizeof(header)); }
  std::span<const std::byte> payload() const noexcept { return std::span(bytes_).subspan(sizeof(header)); }
  template <class T>
  std::span<T> payload_as() noexcept {
    return {reinterpret_cast<T*>(bytes_.data() + sizeof(header)), capacity() / sizeof(T)};
  }

  // Stamps the header for a payload of `payload_bytes` (already written) and
  // returns the bytes to send.
  std::span<const std::byte> write(kind what, std::uint64_t sequence, double value, std::size_t payload_bytes) {
    if (payload_bytes > capacity())
      throw error(errc::invalid_argument, "wire: a payload of " + std::to_string(payload_bytes) +
                                              " bytes does not fit a message of " + std::to_string(capacity()));
    const header stamped{what, 0, sequence, value, payload_bytes};
    std::memcpy(bytes_.data(), &stamped, sizeof(header));
    return std::span<const std::byte>(bytes_).first(sizeof(header) + payload_bytes);
  }

  // A kind a reader accepts, with the payload it must carry.
  struct expected_kind {
    kind what;
    std::size_t payload_bytes;
  };

  // The header of a message of `received` bytes, checked: whole, of one of
  // the `expected` kinds, with exactly the payload it declares, and with a
  // payload of `payload_bytes` unless the kind carries none (cut, done,
  // leaving, ack, joined).
  header read(std::size_t received, std::initializer_list<kind> expected, std::size_t payload_bytes,
              const reader& from) const {
    std::vector<expected_kind> kinds;
    for (kind k : expected) kinds.push_back({k, carries_payload(k) ? payload_bytes : 0});
    return read(received, kinds, from);
  }

  // The same, with the payload each kind carries given (a pull that asks
  // with a header alone, a push that carries a gradient).
  header read(std::size_t received, std::span<const expected_kind> expected, const reader& from) const {
    if (received < sizeof(header))
      from.fail("wire: a message of " + std::to_string(received) + " bytes is shorter than its header");
    header got;
    std::memcpy(&got, bytes_.data(), sizeof(header));
    const expected_kind* known = nullptr;
    for (const expected_kind& k : expected)
      if (got.what == k.what) known = &k;
    if (known == nullptr)
      from.fail("wire: a message of kind " + std::to_string(static_cast<std::uint32_t>(got.what)) + " (" +
                std::string(to_string(got.what)) + ") arrived where this scheme expects another");
    if (got.payload_bytes != received - sizeof(header))
      from.fail("wire: a " + std::string(to_string(got.what)) + " declares " + std::to_string(got.payload_bytes) +
                " payload bytes and carries " + std::to_string(received - sizeof(header)));
    if (got.payload_bytes != known->payload_bytes)
      from.fail("wire: a " + std::string(to_string(got.what)) + " carries " + std::to_string(got.payload_bytes) +
                " payload bytes where " + std::to_string(known->payload_bytes) +
                " were due (models of different sizes?)");
    return got;
  }

 private:
  std::vector<std::byte> bytes_;
};

// The value of a message that carries a push-sum or gossip weight: finite
// and not negative (a NaN or a negative weight would spread into every
// model it is merged with; a zero one, half of a weight halved past the
// smallest double, carries nothing).
inline double weight_of(const header& got, const reader& from) {
  if (!(got.value >= 0.0 && got.value <= std::numeric_limits<double>::max()))
    from.fail("wire: a " + std::string(to_string(got.what)) + " carries the weight " + std::to_string(got.value) +
              ", not a finite number of 0 or more");
  return got.value;
}

// The value of a message that carries a count (pushes, a version, steps):
// a whole number from 0 to 2^53, which a double holds exactly.
inline std::uint64_t count_of(const header& got, const reader& from) {
  constexpr double largest = 9007199254740992.0;  // 2^53
  if (!(got.value >= 0.0 && got.value <= largest) || got.value != std::floor(got.value))
    from.fail("wire: a " + std::string(to_string(got.what)) + " carries the count " + std::to_string(got.value) +
              ", not a whole number from 0 to 2^53");
  return static_cast<std::uint64_t>(got.value);
}

// The value of a message that names a rank: one of [0, ranks).
inline int rank_of(const header& got, int ranks, const reader& from) {
  if (!(got.value >= 0.0 && got.value < static_cast<double>(ranks)) || got.value != std::floor(got.value))
    from.fail("wire: a " + std::string(to_string(got.what)) + " names rank " + std::to_string(got.value) +
              ", not one of the job's " + std::to_string(ranks));
  return static_cast<int>(got.value);
}

// Messages between one sender and one receiver arrive in order (UCP tag
// matching keeps a sender's order on one tag): `got` must be `expected`.
inline void expect_sequence(const header& got, std::uint64_t expected, const reader& from) {
  if (got.sequence != expected)
    from.fail("wire: " + std::string(to_string(got.what)) + " " + std::to_string(got.sequence) + " arrived where " +
              std::to_string(expected) +
              " was due (messages out of order, or a peer running another scheme on this communicator)");
}

}  // namespace chorus::averaging::wire
