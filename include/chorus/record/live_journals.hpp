// Every live journal of the process, so that what ends a process whatever
// it was doing (a signal, an error nobody catches) can write them all.
// open_journal (dump_signal.hpp) lists each one.
#pragma once

#include <chorus/record/journal.hpp>

#include <memory>
#include <mutex>
#include <vector>

namespace chorus::record {

namespace detail {

struct live_journals {
  std::mutex mutex;
  std::vector<std::weak_ptr<journal>> all;

  std::vector<std::shared_ptr<journal>> alive() {
    std::lock_guard lock(mutex);
    std::vector<std::shared_ptr<journal>> found;
    std::erase_if(all, [](const std::weak_ptr<journal>& held) { return held.expired(); });
    for (const std::weak_ptr<journal>& held : all)
      if (auto live = held.lock()) found.push_back(std::move(live));
    return found;
  }
};

inline live_journals& journals() {
  static live_journals* const listed = new live_journals;  // never destroyed: the dump thread outlives main
  return *listed;
}

}  // namespace detail

}  // namespace chorus::record
