// A journal (journal.hpp) written out as one self-describing JSON file per
// rank: the job, rank, size, host, pid, chorus version, why it was written,
// the error that ended the rank (if any), and per communicator its id,
// members and entries, times in Unix-epoch nanoseconds. chorus-trace reads
// these (docs/observability.md has the format).
//
// Writing never waits on a peer and never throws: it goes to a temporary
// file renamed into place, so a reader sees a whole dump or none, and a
// failure to write is one line on stderr.
#pragma once

#include <chorus/core/element_type.hpp>
#include <chorus/core/version.hpp>
#include <chorus/record/journal.hpp>

#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

namespace chorus::record {

namespace detail {

// The file a write goes to before it is renamed into place: one per write,
// so two threads writing one rank's record at once (an error's dump and a
// signal's, the dump of an error nobody catches and SIGTERM's) never
// interleave their bytes; the last rename wins, whole.
inline std::filesystem::path aside(const std::filesystem::path& target) {
  static std::atomic<unsigned> writes{0};
  return target.string() + ".partial." + std::to_string(::getpid()) + "." +
         std::to_string(writes.fetch_add(1, std::memory_order_relaxed));
}

inline void write_string(std::FILE* out, std::string_view text) {
  std::fputc('"', out);
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      std::fputc('\\', out);
      std::fputc(c, out);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      std::fprintf(out, "\\u%04x", static_cast<unsigned>(c));
    } else {
      std::fputc(c, out);
    }
  }
  std::fputc('"', out);
}

inline void write_entry(std::FILE* out, const entry& recorded, const tick_converter& time) {
  const call_description& call = recorded.call;
  std::fprintf(out, "{\"index\":%llu,\"seq\":%llu,\"kind\":", static_cast<unsigned long long>(recorded.index),
               static_cast<unsigned long long>(recorded.sequence));
  write_string(out, to_string(call.what));
  std::fputs(",\"name\":", out);
  write_string(out, call.name.view());
  std::fputs(",\"type\":", out);
  write_string(out, to_string(call.type));
  std::fprintf(out, ",\"count\":%llu,\"bytes\":%llu,\"op\":", static_cast<unsigned long long>(call.count),
               static_cast<unsigned long long>(call.bytes));
  write_string(out, call.op.view());
  std::fprintf(out, ",\"root\":%d,\"peer\":%d,\"algorithm\":", call.root, call.peer);
  write_string(out, recorded.algorithm.view());
  std::fputs(",\"path\":", out);
  write_string(out, to_string(recorded.where));
  std::fputs(",\"state\":", out);
  write_string(out, to_string(recorded.status));
  std::fprintf(out, ",\"nonblocking\":%s,\"parent\":%lld,\"posted_ns\":%lld,\"started_ns\":%lld,\"ended_ns\":%lld}",
               recorded.nonblocking ? "true" : "false", static_cast<long long>(recorded.parent),
               static_cast<long long>(time.unix_ns(recorded.posted)),
               static_cast<long long>(time.unix_ns(recorded.started)),
               static_cast<long long>(time.unix_ns(recorded.ended)));
}

inline void write_journal(std::FILE* out, const journal& recorded, std::string_view reason) {
  const tick_converter time(recorded.start());
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::fprintf(out, "{\"format\":\"chorus-record\",\"format_version\":1,\"chorus_version\":");
  write_string(out, version);
  std::fprintf(out, ",\"job\":\"%016llx\",\"rank\":%d,\"size\":%d,\"host\":",
               static_cast<unsigned long long>(recorded.job()), recorded.rank(), recorded.size());
  write_string(out, host);
  std::fprintf(out, ",\"pid\":%d,\"reason\":", static_cast<int>(::getpid()));
  write_string(out, reason);
  std::fputs(",\"error\":", out);
  const std::string failure = recorded.failure();
  if (failure.empty())
    std::fputs("null", out);
  else
    write_string(out, failure);
  std::fprintf(out, ",\"written_ns\":%lld,\"started_ns\":%lld,\"entries_per_communicator\":%zu,\"communicators\":[",
               static_cast<long long>(clock_anchor::now().unix_ns), static_cast<long long>(recorded.start().unix_ns),
               recorded.settings().entries);
  bool first_ring = true;
  for (const auto& held : recorded.rings()) {
    const auto [members, rank] = held->members();
    std::fprintf(out, "%s\n{\"id\":%u,\"rank\":%d,\"recorded\":%llu,\"members\":[", first_ring ? "" : ",", held->id(),
                 rank, static_cast<unsigned long long>(held->recorded()));
    first_ring = false;
    for (std::size_t i = 0; i < members.size(); ++i) std::fprintf(out, "%s%d", i == 0 ? "" : ",", members[i]);
    std::fputs("],\"entries\":[", out);
    bool first_entry = true;
    for (const entry& recorded_entry : held->snapshot()) {
      std::fputs(first_entry ? "\n" : ",\n", out);
      first_entry = false;
      write_entry(out, recorded_entry, time);
    }
    std::fputs("]}", out);
  }
  std::fputs("]}\n", out);
}

}  // namespace detail

// Writes `recorded` to its dump path (journal::dump_path) and returns the
// path, or an empty one where it could not (said on stderr). `reason`:
// "error", "signal", "exit" or "request".
inline std::filesystem::path dump(const journal& recorded, std::string_view reason) noexcept {
  try {
    const std::filesystem::path target = recorded.dump_path();
    std::error_code ignored;
    std::filesystem::create_directories(target.parent_path(), ignored);
    const std::filesystem::path partial = detail::aside(target);
    std::FILE* out = std::fopen(partial.c_str(), "w");
    if (out == nullptr) {
      std::fprintf(stderr, "chorus: rank %d could not write its flight record to %s\n", recorded.rank(),
                   target.c_str());
      return {};
    }
    detail::write_journal(out, recorded, reason);
    const bool written = std::fclose(out) == 0;
    if (!written || std::rename(partial.c_str(), target.c_str()) != 0) {
      std::filesystem::remove(partial, ignored);
      std::fprintf(stderr, "chorus: rank %d could not write its flight record to %s\n", recorded.rank(),
                   target.c_str());
      return {};
    }
    return target;
  } catch (...) {
    return {};
  }
}

}  // namespace chorus::record
