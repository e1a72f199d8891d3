// Asynchronous schemes whose messages are merged on the trainer's thread,
// and the rule that keeps them from stalling a collective.
//
// GoSGD merges its peers' pushes at its own step boundaries. A peer still
// stepping fills this rank's posted receive and then waits, in its next
// push, for this rank to merge; if this rank has gone into a collective
// with that peer, each waits for the other until the timeout. So a scheme
// with such messages declares itself open from its first step until its
// quiesce() (or finish()), and while it is open, a collective, or another
// scheme's call that waits for its peers' steps (D-PSGD, TreeEASGD, a
// parameter server's pulls, a finish()), over a group that holds another of
// its members raises invalid_argument naming the scheme and quiesce().
// (Async EASGD's pulls wait only for the server's progress thread, which
// nothing holds up: they run.) The rule depends only
// on this rank's own calls, so every rank that runs the same program
// raises at the same call: never a stall. Groups that share no other
// member with the scheme are not held up by it, and run.
//
// Per process world (every communicator of a job on this process); cheap
// when nothing is open: one atomic load per call.
#pragma once

#include <chorus/core/error.hpp>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus {

class pending_merges {
  struct entry;

 public:
  // What a scheme holds: open() at its first step, close() when quiesced,
  // closed when destroyed. Movable with its scheme (the key stays).
  class scheme {
   public:
    scheme() = default;
    scheme(pending_merges& registry, std::string name, std::vector<int> members)
        : state_(std::make_unique<entry>(entry{&registry, std::move(name), std::move(members)})) {}
    scheme(scheme&&) noexcept = default;
    scheme& operator=(scheme&& other) noexcept {
      close();
      state_ = std::move(other.state_);
      return *this;
    }
    ~scheme() { close(); }

    void open() {
      if (state_ && !state_->open) state_->registry->add(*state_);
    }
    void close() noexcept {
      if (state_ && state_->open) state_->registry->remove(*state_);
    }
    // The key a scheme passes as `caller`: its own steps never trip it.
    const void* key() const noexcept { return state_.get(); }

   private:
    std::unique_ptr<entry> state_;
  };

  // Raises invalid_argument if a scheme other than `caller` is open over a
  // group that shares a rank other than `self` with `members` (world ranks).
  // `members`: the group's transport ranks (a range of int).
  template <class Members>
  void require_merged(const Members& members, int self, std::string_view operation,
                      const void* caller = nullptr) const {
    if (count_.load(std::memory_order_acquire) == 0) return;
    std::lock_guard lock(mutex_);
    for (const entry* open : open_) {
      if (open == caller) continue;
      const auto shared = [&](int rank) {
        return rank != self && std::find(open->members.begin(), open->members.end(), rank) != open->members.end();
      };
      if (std::any_of(members.begin(), members.end(), shared))
        throw error(errc::invalid_argument,
                    open->name +
                        " has stepped since its last quiesce(): its peers' messages may be waiting to be "
                        "merged here, and a peer still stepping would wait for that while this rank waits "
                        "in " +
                        std::string(operation) + ". Call quiesce() (or finish()) on the " + open->name +
                        " scheme on every rank first",
                    {self, -1, std::string(operation)});
    }
  }

 private:
  struct entry {
    pending_merges* registry;
    std::string name;
    std::vector<int> members;  // world ranks
    bool open = false;
  };

  void add(entry& opened) {
    std::lock_guard lock(mutex_);
    opened.open = true;
    open_.push_back(&opened);
    count_.store(open_.size(), std::memory_order_release);
  }
  void remove(entry& closed) noexcept {
    std::lock_guard lock(mutex_);
    closed.open = false;
    std::erase(open_, &closed);
    count_.store(open_.size(), std::memory_order_release);
  }

  mutable std::mutex mutex_;
  std::vector<entry*> open_;
  std::atomic<std::size_t> count_{0};
};

}  // namespace chorus
