// An error nobody catches: the C++ runtime finds no handler and calls
// std::terminate without unwinding, so no recorded call ends (call.hpp)
// and no communicator is destroyed; nothing would write the flight record
// that explains the failure. The handler installed here (with the first
// journal that records, chaining the handler it replaces) writes every
// live journal of the process, the uncaught exception's text as its error
// and "uncaught" as its reason, to CHORUS_RECORD_DIR or, where that is
// unset, to $TMPDIR/chorus-record-<job>/, and its CHORUS_TRACE timeline
// so far; then it calls the handler it replaced (the runtime's prints
// the exception and aborts).
//
// A program that installs its own terminate handler after chorus's
// replaces it; one installed before is chained.
#pragma once

#include <chorus/record/dump.hpp>
#include <chorus/record/live_journals.hpp>
#include <chorus/record/trace_file.hpp>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>

namespace chorus::record {

namespace detail {

inline std::terminate_handler& replaced_terminate_handler() noexcept {
  static std::terminate_handler replaced = nullptr;
  return replaced;
}

// The text of the exception std::terminate was called for, if any.
inline std::string uncaught_text() noexcept {
  try {
    const std::exception_ptr current = std::current_exception();
    if (!current) return "std::terminate was called without an exception";
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& failure) {
      return std::string("uncaught: ") + failure.what();
    } catch (...) {
      return "uncaught: an exception that is not a std::exception";
    }
  } catch (...) {
    return "uncaught";
  }
}

[[noreturn]] inline void dump_then_terminate() noexcept {
  static std::atomic<bool> dumped{false};
  if (!dumped.exchange(true)) {  // once, whichever thread terminates first
    const std::string why = uncaught_text();
    try {
      for (const auto& live : journals().alive()) {
        live->note_failure(why);
        write_trace(*live);
        const auto written = dump(*live, "uncaught");
        if (!written.empty())
          std::fprintf(stderr, "chorus: rank %d wrote its flight record to %s\n", live->rank(), written.c_str());
      }
    } catch (...) {}
  }
  if (const std::terminate_handler replaced = replaced_terminate_handler()) replaced();
  std::abort();
}

inline void install_dump_uncaught() noexcept { replaced_terminate_handler() = std::set_terminate(dump_then_terminate); }

}  // namespace detail

}  // namespace chorus::record
