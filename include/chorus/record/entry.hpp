// One recorded operation: what was called (kind, name, element type,
// count, op, root or peer), how it ran (algorithm, path) and when it was
// posted, started and completed or failed. Fixed size, plain words, so the
// ring (ring.hpp) stores it with plain stores and a dump reads it while
// the owner writes.
#pragma once

#include <chorus/core/element_type.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace chorus::record {

// What an entry is. The desync report compares collectives by their
// sequence number; the others it lists.
enum class kind : std::uint8_t { collective, point_to_point, scheme, window };

// Where the buffers were while it ran.
enum class path : std::uint8_t { host, shared_memory, staged, direct, nccl, not_moved };

enum class state : std::uint8_t { posted, started, completed, failed };

constexpr std::string_view to_string(kind value) noexcept {
  constexpr std::array<std::string_view, 4> names{"collective", "point_to_point", "scheme", "window"};
  return names[static_cast<std::size_t>(value)];
}
constexpr std::string_view to_string(path value) noexcept {
  constexpr std::array<std::string_view, 6> names{"host", "shared_memory", "staged", "direct", "nccl", "not_moved"};
  return names[static_cast<std::size_t>(value)];
}
constexpr std::string_view to_string(state value) noexcept {
  constexpr std::array<std::string_view, 4> names{"posted", "started", "completed", "failed"};
  return names[static_cast<std::size_t>(value)];
}

// A short name kept in the entry (longer ones are cut).
template <std::size_t N>
struct short_name {
  std::array<char, N> text{};

  short_name() = default;
  short_name(std::string_view name) noexcept {  // NOLINT: implicit, as a string would be
    if (!name.empty()) std::memcpy(text.data(), name.data(), std::min(name.size(), N - 1));  // data() may be null
  }
  short_name(const char* name) noexcept : short_name(std::string_view(name)) {}  // NOLINT: as above
  std::string_view view() const noexcept { return {text.data(), ::strnlen(text.data(), N)}; }
  bool empty() const noexcept { return text[0] == '\0'; }
};

// What a front door knows of its call when it starts.
struct call_description {
  kind what = kind::collective;
  short_name<32> name;
  dtype type = dtype::uint8;
  std::uint64_t count = 0;
  std::uint64_t bytes = 0;
  short_name<16> op;       // empty: none
  std::int32_t root = -1;  // collectives with a root
  std::int32_t peer = -1;  // point-to-point and one-sided: the other rank
};

// The fields a call changes after posting (algorithm onwards) come last,
// so the ring stores an update as one short run of words.
struct entry {
  std::uint64_t index = 0;     // its place in the ring's history: 0, 1, 2, ...
  std::uint64_t sequence = 0;  // collectives: 1, 2, ... on this communicator, the same on every rank; else 0
  std::int64_t parent = -1;    // index of the recorded call it ran inside, on this ring, or -1
  std::uint64_t posted = 0;    // ticks (clock.hpp); 0: not yet
  call_description call;
  short_name<24> algorithm;  // empty: none chosen (point-to-point, a backend's own)
  std::uint64_t started = 0;
  std::uint64_t ended = 0;  // completed or failed
  record::path where = path::host;
  record::state status = state::posted;
  bool nonblocking = false;
  bool described = true;  // false: posted with its name only; the front door it runs describes it
  std::array<std::uint8_t, 4> padding{};
};

}  // namespace chorus::record
