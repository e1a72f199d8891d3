// window_request: the completion of a non-blocking window operation
// (window.hpp: put_nonblocking, accumulate_nonblocking, get_nonblocking,
// update_nonblocking). test() polls it; wait() waits, bounded by the
// window's timeout. Both raise the operation's error, again each time they
// are asked after it failed. A request is valid while its window lives;
// asked after the window is gone, it is an invalid_argument error.
#pragma once

#include <chorus/core/error.hpp>

#include <functional>
#include <utility>

namespace chorus {

class window_request {
 public:
  window_request() = default;
  window_request(std::function<bool()> test, std::function<void()> wait)
      : test_(std::move(test)), wait_(std::move(wait)) {}

  bool valid() const noexcept { return static_cast<bool>(test_); }

  // True once complete.
  bool test() {
    require(valid(), "test() on an empty window_request");
    if (!done_) done_ = test_();
    return done_;
  }

  void wait() {
    require(valid(), "wait() on an empty window_request");
    if (!done_) wait_();
    done_ = true;
  }

 private:
  std::function<bool()> test_;
  std::function<void()> wait_;
  bool done_ = false;
};

}  // namespace chorus
