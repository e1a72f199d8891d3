// recorded_call: what a front door holds while its call runs, so that the
// call is in its communicator's flight ring (ring.hpp) from the moment it
// is posted: started, then completed, or failed when an exception leaves
// it. One per front door:
//
//   record::recorded_call recorded(comm.recorder(), record::collective("allreduce", data, op));
//
// Calls nest: a collective inside a recorded collective of the same ring
// (the host run of a staged call, the check's exchange) adds no entry and
// is part of it; anything else inside a recorded call (a scheme's
// allreduce, its pushes) is an entry of its own whose parent is that call.
// report() and report_path() tell the innermost recorded call of the thread
// which algorithm and path ran (the first word stays); the ring learns them
// with the call's end, so a call costs one store of its entry when it
// starts and one of its last words when it ends. Under CHORUS_TRACE the
// call is also a span of its journal's timeline, and the phases its
// algorithm marks (trace.hpp) are spans inside it.
//
// An exception that leaves the outermost recorded call of a thread is an
// error raised to the caller: the call is marked failed, the error's text
// kept, the journal dumped where CHORUS_RECORD_DIR is set (dump.hpp) and
// its timeline written where CHORUS_TRACE is (trace_file.hpp). An error
// nobody catches never leaves the call this way (the runtime terminates
// without unwinding): dump_uncaught.hpp writes both then.
#pragma once

#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/rank_local.hpp>
#include <chorus/record/clock.hpp>
#include <chorus/record/dump.hpp>
#include <chorus/record/entry.hpp>
#include <chorus/record/journal.hpp>
#include <chorus/record/ring.hpp>
#include <chorus/record/trace.hpp>
#include <chorus/record/trace_file.hpp>

#include <cstdio>
#include <exception>
#include <span>
#include <string_view>

namespace chorus::record {

// Where a communicator records: its ring and its world's journal (both
// null when recording is off). The communicator holds both for the call.
struct target {
  ring* on = nullptr;
  journal* book = nullptr;
};

// A communicator's target; none for one that does not record (a backend's
// communicator records through the chorus communicator it was made from).
template <class Communicator>
target recorder_of(const Communicator& comm) noexcept {
  if constexpr (requires { comm.recorder(); })
    return comm.recorder();
  else
    return {};
}

// Descriptions of the usual calls. Point-to-point moves any trivially
// copyable type: what is not an element type counts as bytes.
template <class T, std::size_t E>
call_description collective(std::string_view name, std::span<T, E> data, std::string_view op = {}, int root = -1) {
  return {kind::collective, name, dtype_of<std::remove_const_t<T>>, data.size(), data.size_bytes(), op, root, -1};
}
inline call_description collective(std::string_view name) {
  return {kind::collective, name, dtype::uint8, 0, 0, {}, -1, -1};
}
template <class T, std::size_t E>
call_description point_to_point(std::string_view name, std::span<T, E> data, int peer) {
  using U = std::remove_const_t<T>;
  if constexpr (element<U>)
    return {kind::point_to_point, name, dtype_of<U>, data.size(), data.size_bytes(), {}, -1, peer};
  else
    return {kind::point_to_point, name, dtype::uint8, data.size_bytes(), data.size_bytes(), {}, -1, peer};
}

// A scheme's step or exchange (averaging/scheme.hpp's metered), and a
// window's operation on `count` floats.
inline call_description scheme_call(std::string_view name) {
  return {kind::scheme, name, dtype::uint8, 0, 0, {}, -1, -1};
}
inline call_description window_call(std::string_view name, std::size_t count) {
  return {kind::window, name, dtype::float32, count, count * sizeof(float), {}, -1, -1};
}

// The name this thread's outermost recorded calls take instead of their
// own while it is set: a binding that records its caller's operations
// (the torch backend: "allreduce_coalesced", "reduce_scatter_tensor") sets
// it around each of them.
inline short_name<32>& caller_name() noexcept {
  struct tag;
  return rank_local<short_name<32>, tag>();
}
inline void apply_caller_name(call_description& call) noexcept {
  const short_name<32>& name = caller_name();
  if (!name.empty()) call.name = name;
}

// An entry posted on one thread and run on another (a non-blocking
// collective: posted at the call, run by the background thread).
struct posted_call {
  target where;
  entry written;
};

// `described` false: `call` holds only a name; the front door the call runs
// fills in the rest (a binding that does not know the element type).
inline posted_call post(const target& where, const call_description& call, bool described = true) {
  posted_call posted{where, {}};
  if (!where.on) return posted;
  posted.written.call = call;
  apply_caller_name(posted.written.call);
  posted.written.described = described;
  posted.written.nonblocking = true;
  posted.written.posted = ticks();
  where.on->post(posted.written);
  return posted;
}

class recorded_call {
 public:
  recorded_call(const target& where, const call_description& call) : previous_(current()) {
    current() = this;
    if (!where.on) return;
    if (previous_ != nullptr && previous_->owner().where_.on == where.on && call.what == kind::collective &&
        previous_->owner().written_.call.what == kind::collective) {
      alias_ = &previous_->owner();  // part of the call it runs inside
      if (!alias_->written_.described) alias_->describe(call);
      return;
    }
    where_ = where;
    exceptions_ = std::uncaught_exceptions();
    written_.call = call;
    if (previous_ == nullptr) apply_caller_name(written_.call);
    if (previous_ != nullptr && previous_->owner().where_.on == where_.on)
      written_.parent = static_cast<std::int64_t>(previous_->owner().written_.index);
    written_.posted = written_.started = ticks();
    written_.status = state::started;
    where_.on->post(written_);
    trace_into(where.book);
  }

  // Runs an entry posted earlier (post()).
  explicit recorded_call(posted_call&& posted) : previous_(current()) {
    current() = this;
    if (!posted.where.on) return;
    where_ = posted.where;
    exceptions_ = std::uncaught_exceptions();
    written_ = posted.written;
    written_.started = ticks();
    written_.status = state::started;
    where_.on->update(written_);
    trace_into(where_.book);
  }

  recorded_call(const recorded_call&) = delete;
  recorded_call& operator=(const recorded_call&) = delete;

  ~recorded_call() {
    current() = previous_;
    if (!where_.on) return;
    const bool failing = std::uncaught_exceptions() > exceptions_;
    written_.ended = ticks();
    written_.status = failing ? state::failed : state::completed;
    where_.on->update(written_);
    if (traced_ != nullptr) {
      active_trace() = outer_trace_;
      traced_->add_call(where_.on->id(), written_);
    }
    if (where_.book != nullptr) where_.book->finished_one();
    if (failing && previous_ == nullptr) raised_to_caller();
  }

  // What ran, as report() and report_path() learn it; the first word stays.
  static void chose(std::string_view algorithm) noexcept {
    recorded_call* const innermost = current();
    if (innermost == nullptr || !innermost->owner().where_.on) return;
    recorded_call& call = innermost->owner();
    if (!call.written_.algorithm.empty()) return;
    call.written_.algorithm = algorithm;
    if (algorithm == "shared_memory" && call.written_.where == path::host) call.written_.where = path::shared_memory;
  }
  static void moved(path where) noexcept {
    recorded_call* const innermost = current();
    if (innermost == nullptr || !innermost->owner().where_.on) return;
    recorded_call& call = innermost->owner();
    if (call.written_.where != path::host) return;
    call.written_.where = where;
  }

 private:
  static recorded_call*& current() noexcept {
    struct tag;
    return rank_local<recorded_call*, tag>();
  }
  recorded_call& owner() noexcept { return alias_ != nullptr ? *alias_ : *this; }
  // The phases this thread marks from now on go to `book`'s timeline.
  void trace_into(const journal* book) noexcept {
    if (book == nullptr || book->trace() == nullptr) return;
    traced_ = book->trace();
    outer_trace_ = active_trace();
    active_trace() = traced_;
  }
  void describe(const call_description& call) noexcept {
    const short_name<32> name = written_.call.name;
    written_.call = call;
    written_.call.name = name;
    written_.described = true;
    where_.on->rewrite(written_);
  }

  // Never throws over the error on its way to the caller.
  void raised_to_caller() const noexcept {
    if (where_.book == nullptr) return;
    try {
      where_.book->note_failure(chorus::detail::latest_error());
      write_trace(*where_.book);
      if (where_.book->settings().directory.empty()) return;
      const auto written = dump(*where_.book, "error");
      if (!written.empty())
        std::fprintf(stderr, "chorus: rank %d wrote its flight record to %s\n", where_.book->rank(), written.c_str());
    } catch (...) {}
  }

  recorded_call* previous_;
  recorded_call* alias_ = nullptr;
  target where_;
  entry written_;
  trace_log* traced_ = nullptr;       // the timeline this call is a span of
  trace_log* outer_trace_ = nullptr;  // the thread's timeline before it
  int exceptions_ = 0;                // in flight when it started; read only where recorded, as it is not free
};

}  // namespace chorus::record
