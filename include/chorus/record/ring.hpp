// A communicator's flight ring: its last entries (entry.hpp), a power of
// two of them, overwritten oldest first. The thread that runs a call
// writes its entry with plain stores; a dump (another thread, at any
// time: a signal, an error elsewhere) copies entries out under a
// per-slot version (a sequence lock), so it never waits on the writer and
// never reads half an update. Cost of a recorded call: one atomic
// addition, a 160-byte store when it starts and one of 48 when it ends.
#pragma once

#include <chorus/record/entry.hpp>

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>  // offsetof
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

namespace chorus::record {

class ring {
 public:
  // `members`: the communicator's ranks as transport (world) ranks; `rank`
  // this process's place among them.
  ring(std::uint32_t id, std::vector<int> members, int rank, std::size_t capacity)
      : id_(id),
        rank_(rank),
        members_(std::move(members)),
        capacity_(std::bit_ceil(std::max<std::size_t>(capacity, 1))),
        slots_(std::make_unique<slot[]>(capacity_)) {}

  std::uint32_t id() const noexcept { return id_; }
  std::size_t capacity() const noexcept { return capacity_; }
  std::uint64_t recorded() const noexcept { return next_index_.load(std::memory_order_relaxed); }

  // The group after it lost or gained members (communicator::without, with).
  void set_members(std::vector<int> members, int rank) {
    std::lock_guard lock(members_mutex_);
    members_ = std::move(members);
    rank_ = rank;
  }
  std::pair<std::vector<int>, int> members() const {
    std::lock_guard lock(members_mutex_);
    return {members_, rank_};
  }

  // Gives `written` its index (and a collective its sequence number) and
  // stores it whole.
  void post(entry& written) noexcept {
    written.index = next_index_.fetch_add(1, std::memory_order_relaxed);
    // Collectives are posted by one thread at a time (the communicator's
    // rule; a non-blocking one by its caller): no atomic addition.
    if (written.call.what == kind::collective) {
      written.sequence = next_sequence_.load(std::memory_order_relaxed);
      next_sequence_.store(written.sequence + 1, std::memory_order_relaxed);
    }
    store(written, 0, word_count, false);
  }

  // Stores what a call changes after posting (entry's fields from
  // `algorithm` on), unless its slot has been reused since.
  void update(const entry& written) noexcept { store(written, changing_from, word_count, true); }
  // Stores all of it again (a call described after it was posted), unless
  // its slot has been reused since.
  void rewrite(const entry& written) noexcept { store(written, 0, word_count, true); }

  // The entries still held, oldest first; each one as it was between two
  // updates.
  std::vector<entry> snapshot() const {
    const std::uint64_t end = next_index_.load(std::memory_order_acquire);
    const std::uint64_t begin = end > capacity_ ? end - capacity_ : 0;
    std::vector<entry> entries;
    entries.reserve(static_cast<std::size_t>(end - begin));
    for (std::uint64_t index = begin; index < end; ++index) {
      entry copy;
      if (load(slots_[index & (capacity_ - 1)], copy) && copy.index == index) entries.push_back(copy);
    }
    return entries;
  }

 private:
  static constexpr std::size_t word_bytes = sizeof(std::uint64_t);
  static constexpr std::size_t word_count = sizeof(entry) / word_bytes;
  static_assert(sizeof(entry) % word_bytes == 0 && std::is_trivially_copyable_v<entry>);
  static constexpr std::size_t changing_from = offsetof(entry, algorithm) / word_bytes;
  static_assert(offsetof(entry, algorithm) % word_bytes == 0 && offsetof(entry, index) == 0);

  struct slot {
    std::atomic<std::uint64_t> version{0};  // odd while being written
    std::array<std::atomic<std::uint64_t>, word_count> words{};
  };

  // `reused_check`: only if the slot still holds this entry (word 0 is its index).
  void store(const entry& written, std::size_t first, std::size_t end, bool reused_check) noexcept {
    slot& target = slots_[written.index & (capacity_ - 1)];
    const std::uint64_t version = target.version.load(std::memory_order_relaxed);
    target.version.store(version + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    if (reused_check && target.words[0].load(std::memory_order_relaxed) != written.index) {
      target.version.store(version + 2, std::memory_order_release);
      return;
    }
    // Each word read from the entry as it is stored: a whole copy of the
    // entry first (bit_cast) costs a third of a recorded call, its loads
    // stalling on the narrow stores that just filled the entry.
    for (std::size_t word = first; word < end; ++word) {
      std::uint64_t value;
      std::memcpy(&value, reinterpret_cast<const char*>(&written) + word * word_bytes, word_bytes);
      target.words[word].store(value, std::memory_order_relaxed);
    }
    target.version.store(version + 2, std::memory_order_release);
  }

  static bool load(const slot& source, entry& copy) noexcept {
    for (int attempt = 0; attempt < 64; ++attempt) {
      const std::uint64_t before = source.version.load(std::memory_order_acquire);
      if (before % 2 == 1) continue;
      std::array<std::uint64_t, word_count> plain;
      for (std::size_t word = 0; word < word_count; ++word)
        plain[word] = source.words[word].load(std::memory_order_relaxed);
      std::atomic_thread_fence(std::memory_order_acquire);
      if (source.version.load(std::memory_order_relaxed) != before) continue;
      copy = std::bit_cast<entry>(plain);
      return true;
    }
    return false;  // written throughout: left out of this dump
  }

  std::uint32_t id_;
  mutable std::mutex members_mutex_;
  int rank_;
  std::vector<int> members_;
  std::size_t capacity_;
  std::unique_ptr<slot[]> slots_;
  std::atomic<std::uint64_t> next_index_{0};
  std::atomic<std::uint64_t> next_sequence_{1};
};

}  // namespace chorus::record
