// CHECK that an action throws chorus::error of a category, with a message
// containing a fragment.
#pragma once

#include <chorus/core/error.hpp>

#include <doctest/doctest.h>

#include <string>
#include <string_view>

namespace chorus_test {

template <class Action>
void expect_error(Action&& action, chorus::errc category, std::string_view fragment = {}) {
  try {
    action();
    FAIL("no chorus::error was thrown");
  } catch (const chorus::error& failure) {
    const std::string message = failure.what();
    CAPTURE(message);
    CHECK(failure.category() == category);
    CHECK(message.find(fragment) != std::string::npos);
  }
}

}  // namespace chorus_test
