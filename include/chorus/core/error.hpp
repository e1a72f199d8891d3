// chorus::error: the one exception type of the library.
//
// Every failure carries a category (what kind of thing went wrong, so callers
// can react: retry on timeout, abort on peer_failure, fix their call on
// invalid_argument) and a message that names the rank, the peer and the
// operation, so a log line from a 64-rank job says who waited on whom.
#pragma once

#include <chorus/core/rank_local.hpp>

#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace chorus {

enum class errc {
  timeout,           // a wait ran past its deadline
  peer_failure,      // a peer died or its connection broke
  invalid_argument,  // the caller passed something unusable
  mismatch,          // ranks disagree (sizes, counts, types, protocol)
  transport,         // the transport itself failed (UCX, sockets)
  unavailable,       // this machine lacks what the call needs (no GPU, no CUDA driver)
};

constexpr std::string_view to_string(errc category) noexcept {
  switch (category) {
    case errc::timeout: return "timeout";
    case errc::peer_failure: return "peer_failure";
    case errc::invalid_argument: return "invalid_argument";
    case errc::mismatch: return "mismatch";
    case errc::transport: return "transport";
    case errc::unavailable: return "unavailable";
  }
  return "unknown";
}

// Who was doing what when the failure happened. rank/peer are -1 when they do
// not apply (a bad environment variable has no peer).
struct error_context {
  int rank = -1;
  int peer = -1;
  std::string operation;
};

namespace detail {
// The text of the last error made on this thread: the flight recorder
// (record/call.hpp) keeps it with a call that failed.
inline std::string& latest_error() {
  struct tag;
  return rank_local<std::string, tag>();
}
}  // namespace detail

class error : public std::runtime_error {
 public:
  error(errc category, std::string detail, error_context context = {})
      : std::runtime_error(format(category, detail, context)),
        category_(category),
        context_(std::move(context)),
        detail_(std::move(detail)) {
    detail::latest_error() = what();
  }

  errc category() const noexcept { return category_; }
  int rank() const noexcept { return context_.rank; }
  int peer() const noexcept { return context_.peer; }
  const std::string& operation() const noexcept { return context_.operation; }
  const std::string& detail() const noexcept { return detail_; }

 private:
  static std::string format(errc category, const std::string& detail, const error_context& context) {
    std::string text = "chorus ";
    text += to_string(category);
    if (context.rank >= 0) text += ": rank " + std::to_string(context.rank);
    if (context.peer >= 0) text += ", peer " + std::to_string(context.peer);
    if (!context.operation.empty()) text += ", in " + context.operation;
    text += ": ";
    text += detail;
    return text;
  }

  errc category_;
  error_context context_;
  std::string detail_;
};

// The same error, naming the rank when it did not (a bad setting is found
// before the rank is known to the code that parses it).
inline error with_rank(const error& failure, int rank, std::string_view operation) {
  if (failure.rank() >= 0) return failure;
  return error(failure.category(), failure.detail(),
               {rank, failure.peer(), failure.operation().empty() ? std::string(operation) : failure.operation()});
}

// Shorthand for argument checks: CHORUS_REQUIRE-style without a macro.
inline void require(bool condition, std::string_view what, const error_context& context = {}) {
  if (!condition) throw error(errc::invalid_argument, std::string(what), context);
}

}  // namespace chorus
