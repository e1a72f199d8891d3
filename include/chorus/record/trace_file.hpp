// A rank's timeline (trace.hpp) written as Chrome trace events, which
// Perfetto (ui.perfetto.dev) and chrome://tracing open: one process per
// rank (pid = its rank), one track per thread, a complete event ("ph":"X")
// per recorded call and per phase, sorted by start (an enclosing span
// before the spans it holds), times in microseconds from midnight UTC of
// the day the rank started, so the ranks of a job line up and a double
// keeps them to the nanosecond. The schema is tools/trace-event.schema.json;
// chorus-trace merges ranks' files, plots and summarises them.
//
// Writing never throws: a temporary file renamed into place, a failure one
// line on stderr.
#pragma once

#include <chorus/core/element_type.hpp>
#include <chorus/core/version.hpp>
#include <chorus/record/dump.hpp>
#include <chorus/record/journal.hpp>
#include <chorus/record/trace.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

namespace chorus::record {

namespace detail {

inline constexpr std::int64_t nanoseconds_per_day = 86'400'000'000'000;

inline void write_call_arguments(std::FILE* out, std::uint32_t communicator, const entry& call) {
  std::fprintf(out, "\"args\":{\"communicator\":%u,\"seq\":%llu,\"type\":", communicator,
               static_cast<unsigned long long>(call.sequence));
  write_string(out, to_string(call.call.type));
  std::fprintf(out, ",\"count\":%llu,\"bytes\":%llu,\"op\":", static_cast<unsigned long long>(call.call.count),
               static_cast<unsigned long long>(call.call.bytes));
  write_string(out, call.call.op.view());
  std::fprintf(out, ",\"root\":%d,\"peer\":%d,\"algorithm\":", call.call.root, call.call.peer);
  write_string(out, call.algorithm.view());
  std::fputs(",\"path\":", out);
  write_string(out, to_string(call.where));
  std::fputs(",\"state\":", out);
  write_string(out, to_string(call.status));
  std::fputc('}', out);
}

inline void write_trace_event(std::FILE* out, const trace_event& event, int rank, const tick_converter& time,
                              std::int64_t origin_ns) {
  const double begin_us = static_cast<double>(time.unix_ns(event.begin) - origin_ns) / 1000.0;
  const double duration_us = static_cast<double>(time.unix_ns(event.end) - time.unix_ns(event.begin)) / 1000.0;
  std::fputs("{\"name\":", out);
  write_string(out, event.is_call ? event.call.call.name.view() : event.phase.view());
  std::fputs(",\"cat\":", out);
  write_string(out, event.is_call ? to_string(event.call.call.what) : std::string_view("phase"));
  std::fprintf(out, ",\"ph\":\"X\",\"ts\":%.3f,\"dur\":%.3f,\"pid\":%d,\"tid\":%u", begin_us,
               std::max(duration_us, 0.0), rank, event.thread);
  if (event.is_call) {
    std::fputc(',', out);
    write_call_arguments(out, event.communicator, event.call);
  }
  std::fputc('}', out);
}

inline void write_trace(std::FILE* out, const journal& recorded, const trace_log& trace) {
  const tick_converter time(recorded.start());
  const std::int64_t origin_ns = recorded.start().unix_ns / nanoseconds_per_day * nanoseconds_per_day;
  std::vector<trace_event> events = trace.events();
  // By start; of two that start together, the longer (the enclosing) first.
  std::stable_sort(events.begin(), events.end(), [](const trace_event& a, const trace_event& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.begin != b.begin) return a.begin < b.begin;
    return a.end > b.end;
  });
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const int rank = recorded.rank();
  std::fputs("{\"displayTimeUnit\":\"ns\",\"otherData\":{\"format\":\"chorus-trace\",\"chorus_version\":", out);
  write_string(out, version);
  std::fprintf(out, ",\"job\":\"%016llx\",\"rank\":%d,\"size\":%d,\"host\":",
               static_cast<unsigned long long>(recorded.job()), rank, recorded.size());
  write_string(out, host);
  std::fprintf(out, ",\"pid\":%d,\"origin_unix_ns\":%lld,\"dropped_events\":%llu},\"traceEvents\":[\n",
               static_cast<int>(::getpid()), static_cast<long long>(origin_ns),
               static_cast<unsigned long long>(trace.dropped()));
  std::fprintf(out, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"name\":", rank);
  write_string(out, "rank " + std::to_string(rank) + " (" + host + ")");
  std::fprintf(out,
               "}},\n{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":%d,\"tid\":0,\"args\":{\"sort_index\":%d}}",
               rank, rank);
  for (const trace_event& event : events) {
    std::fputs(",\n", out);
    write_trace_event(out, event, rank, time, origin_ns);
  }
  std::fputs("]}\n", out);
}

}  // namespace detail

// Writes `recorded`'s timeline to its trace path (journal::trace_path) and
// returns the path; an empty one where it has none or could not (said on
// stderr).
inline std::filesystem::path write_trace(const journal& recorded) noexcept {
  const trace_log* trace = recorded.trace();
  if (trace == nullptr) return {};
  try {
    const std::filesystem::path target = recorded.trace_path();
    std::error_code ignored;
    if (target.has_parent_path()) std::filesystem::create_directories(target.parent_path(), ignored);
    const std::filesystem::path partial = detail::aside(target);
    std::FILE* out = std::fopen(partial.c_str(), "w");
    bool written = out != nullptr;
    if (written) {
      detail::write_trace(out, recorded, *trace);
      written = std::fclose(out) == 0 && std::rename(partial.c_str(), target.c_str()) == 0;
    }
    if (!written) {
      std::filesystem::remove(partial, ignored);
      std::fprintf(stderr, "chorus: rank %d could not write its timeline to %s\n", recorded.rank(), target.c_str());
      return {};
    }
    return target;
  } catch (...) {
    return {};
  }
}

}  // namespace chorus::record
