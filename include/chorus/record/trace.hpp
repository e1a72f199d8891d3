// A rank's timeline: every recorded call (call.hpp) as a span, and inside
// it the spans of the algorithm's phases (shared-memory steps, ring hops,
// encoding and decoding, staging copies), for CHORUS_TRACE=FILE
// (trace_file.hpp writes them as Chrome trace events).
//
//   const record::phase reducing("shared-memory reduce");   // in an algorithm
//
// A phase belongs to the recorded call its thread runs: recorded_call
// points the thread at its journal's trace while it runs, so an algorithm
// needs no communicator to mark a phase, and a phase outside any traced
// call costs one thread-local load. Spans are kept whole at their end (a
// mutex, an append); past `capacity` events the rest are counted, not kept.
#pragma once

#include <chorus/core/rank_local.hpp>
#include <chorus/record/clock.hpp>
#include <chorus/record/entry.hpp>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <vector>

namespace chorus::record {

// Events a rank keeps (about 200 bytes each): a minute of 1 KiB
// allreduces with their phases.
inline constexpr std::size_t trace_capacity = std::size_t{1} << 20;

struct trace_event {
  std::uint64_t begin = 0;  // ticks
  std::uint64_t end = 0;
  std::uint32_t thread = 0;        // this process's number for the thread that ran it
  std::uint32_t communicator = 0;  // calls: their communicator's id
  bool is_call = false;
  short_name<40> phase;  // phases: the name
  entry call;            // calls: the entry as it ended
};

class trace_log {
 public:
  explicit trace_log(std::size_t capacity = trace_capacity) : capacity_(capacity) {}

  void add_call(std::uint32_t communicator, const entry& ended) noexcept {
    trace_event event;
    event.begin = ended.started;
    event.end = ended.ended;
    event.communicator = communicator;
    event.is_call = true;
    event.call = ended;
    add(event);
  }
  void add_phase(std::string_view name, std::uint64_t begin, std::uint64_t end) noexcept {
    trace_event event;
    event.begin = begin;
    event.end = end;
    event.phase = name;
    add(event);
  }

  std::vector<trace_event> events() const {
    std::lock_guard lock(mutex_);
    return events_;
  }
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }

  // A small number per thread of the process, in order of first use: a track of the timeline.
  static std::uint32_t thread_number() noexcept {
    static std::atomic<std::uint32_t> next{0};
    thread_local const std::uint32_t mine = next.fetch_add(1, std::memory_order_relaxed);
    return mine;
  }

 private:
  void add(trace_event& event) noexcept {
    event.thread = thread_number();
    try {
      std::lock_guard lock(mutex_);
      if (events_.size() < capacity_) {
        events_.push_back(event);
        return;
      }
    } catch (...) {  // no memory for more: counted as dropped
    }
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }

  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::vector<trace_event> events_;
  std::atomic<std::uint64_t> dropped_{0};
};

// The trace of the recorded call this thread runs now; null when none is
// traced.
inline trace_log*& active_trace() noexcept {
  struct tag;
  return rank_local<trace_log*, tag>();
}

// One phase of an algorithm, from construction to destruction, in the
// trace of the call it runs in. `name` is kept (cut to 39 characters).
class phase {
 public:
  explicit phase(std::string_view name) noexcept : log_(active_trace()) {
    if (log_ == nullptr) return;
    name_ = name;
    begin_ = ticks();
  }
  ~phase() {
    if (log_ != nullptr) log_->add_phase(name_, begin_, ticks());
  }
  phase(const phase&) = delete;
  phase& operator=(const phase&) = delete;

 private:
  trace_log* log_;
  std::string_view name_;
  std::uint64_t begin_ = 0;
};

}  // namespace chorus::record
