// One slot of a tensor window: where one writer leaves tensors for one
// reader, and the protocol that keeps a reader from ever seeing a torn one.
//
//   [ begun | completed | consumed | ... ]  64 bytes of counters
//   [ entry (completed odd)  ]  header (kind, number, p, bytes) + payload
//   [ entry (completed even) ]
//
// Double buffer with counters. The slot's writer (its only writer) writes
// entry k as: begun = k; fence; the entry into buffer k mod 2; fence;
// completed = k. A reader copies entry c = completed, then reads begun: if
// begun < c + 2, buffer c mod 2 was not rewritten while it copied (the
// writer rewrites it only for entry c + 2), so the copy is whole; otherwise
// it copies again. A writer that dies mid-entry leaves begun = completed + 1:
// the entry being written is never visible, the one before it is intact.
// Why not a seqlock on one buffer: a dead writer would leave it torn for
// good, and the reader would have nothing to fall back to.
//
// A put replaces the slot's value, an accumulate adds to it; entries carry
// a kind so the reader applies them in order. A put may overwrite any older
// entry (it supersedes them). An accumulate must not overwrite an entry the
// reader has not applied: the writer writes accumulate k only once
// consumed >= k - 2 (the reader's counter, which the writer reads), else it
// keeps the sum pending and writes it later. So a reader never needs more
// than the last two entries: the newest, and the one before it when the
// newest is an accumulate.
//
// The counters are 8-byte words in one cache line, written with atomics
// (plain atomic stores on this host, UCX 64-bit atomics across hosts).
#pragma once

#include <chorus/core/error.hpp>

#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace chorus::windows {

inline constexpr std::size_t line_bytes = 64;
inline constexpr std::size_t begun_at = 0;
inline constexpr std::size_t completed_at = 8;
inline constexpr std::size_t consumed_at = 16;

enum class entry_kind : std::uint32_t { put = 1, accumulate = 2 };

struct entry_header {
  entry_kind kind{};
  std::uint32_t reserved = 0;
  std::uint64_t number = 0;         // k: the writer's count of entries into this slot
  double p = 0.0;                   // the weight that travels with the tensor (push-sum)
  std::uint64_t payload_bytes = 0;  // what follows the header
};
static_assert(sizeof(entry_header) == 32, "the entry header is part of the window's layout");

constexpr std::size_t round_up(std::size_t bytes, std::size_t unit) noexcept {
  return (bytes + unit - 1) / unit * unit;
}

// Byte offsets inside a slot whose entries carry `payload_bytes`.
struct slot_layout {
  std::size_t payload_bytes = 0;

  std::size_t entry_bytes() const noexcept { return round_up(sizeof(entry_header) + payload_bytes, line_bytes); }
  std::size_t bytes() const noexcept { return line_bytes + 2 * entry_bytes(); }
  std::size_t entry_at(std::uint64_t number) const noexcept { return line_bytes + (number % 2) * entry_bytes(); }
};

// A window's host region: its published tensor's double buffer (floats),
// then one slot per source (encoded tensors), sources ascending. Over
// device slots both carry no payload (device_region.hpp holds it).
struct region_layout {
  std::size_t elements = 0;
  slot_layout slot{};
  slot_layout published{};

  std::size_t slot_at(std::size_t position) const noexcept { return published.bytes() + position * slot.bytes(); }
  std::size_t bytes(std::size_t sources) const noexcept { return slot_at(sources); }
};

// An 8-byte counter in memory other processes write too.
inline std::atomic_ref<std::uint64_t> counter_at(std::byte* slot, std::size_t offset) noexcept {
  return std::atomic_ref<std::uint64_t>(*reinterpret_cast<std::uint64_t*>(slot + offset));
}

// Copies bytes another rank may be rewriting at the same moment: the slot
// protocol above discards such a copy, so the race is by design (the
// thread sanitizer is told so by name: scripts/tsan.supp).
[[gnu::noinline]] inline void copy_racing(void* to, const void* from, std::size_t bytes) noexcept {
  if (bytes != 0) std::memcpy(to, from, bytes);
}

// The header of an entry copied out of a slot, checked after the copy was
// found whole: a different number or size means writer and reader disagree
// on the window (or memory was overwritten), never a race; a weight that is
// not a finite number would spread into every tensor it is merged with.
inline entry_header checked_header(const std::byte* entry, std::uint64_t number, std::size_t payload_bytes,
                                   const char* operation, int rank, int peer) {
  entry_header header;
  std::memcpy(&header, entry, sizeof header);
  const bool known = header.kind == entry_kind::put || header.kind == entry_kind::accumulate;
  if (!std::isfinite(header.p))
    throw error(errc::mismatch,
                "window entry " + std::to_string(number) + " carries the weight " + std::to_string(header.p) +
                    ", not a finite number",
                {rank, peer, operation});
  if (!known || header.number != number || header.payload_bytes != payload_bytes)
    throw error(errc::mismatch,
                "window entry " + std::to_string(number) + " holds entry " + std::to_string(header.number) + " of " +
                    std::to_string(header.payload_bytes) + " bytes (kind " +
                    std::to_string(static_cast<std::uint32_t>(header.kind)) + "), expected " +
                    std::to_string(payload_bytes) + " bytes: the ranks disagree on the window",
                {rank, peer, operation});
  return header;
}

}  // namespace chorus::windows
