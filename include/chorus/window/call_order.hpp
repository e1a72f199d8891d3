// call_order: a window's calls complete in the order made. A get or update
// made non-blocking runs on the communicator's background thread (in the
// queue of its non-blocking collectives, so behind at most their timeouts);
// the window's next call waits for it first. Its error is raised by its
// request, or else by the window's next call, once.
#pragma once

#include <chorus/comm/background.hpp>
#include <chorus/core/error.hpp>
#include <chorus/route/memory_router.hpp>
#include <chorus/window/window_request.hpp>

#include <chrono>
#include <exception>
#include <future>
#include <memory>
#include <utility>

namespace chorus::windows {

class call_order {
 public:
  // Runs `work` on `comm`'s background thread (device memory orders on the
  // caller's stream: route/memory_router.hpp) and returns its request.
  template <class Communicator, class Work>
  window_request in_background(Communicator& comm, Work work) {
    auto op = std::make_shared<background_op>();
    op->done = comm.background().submit(on_callers_stream(std::move(work)));
    in_flight_ = op;
    const std::chrono::milliseconds limit = limit_for(comm);
    return {[op] { return op->settle(std::chrono::milliseconds(0), true); },
            [op, limit, where = error_context{comm.world_rank(comm.rank()), -1, "window request"}] {
              if (!op->settle(limit, true))
                throw error(errc::timeout, "the window's background operation did not finish", where);
            }};
  }

  // Before any other call: the operation in flight is waited for (and its
  // error raised if no request raised it yet).
  template <class Communicator>
  void wait_previous(const Communicator& comm) const {
    if (!in_flight_) return;
    if (!in_flight_->settle(limit_for(comm), false))
      throw error(errc::timeout, "the window's background operation did not finish",
                  {comm.world_rank(comm.rank()), -1, "window"});
    in_flight_.reset();
  }

  // At teardown: its waits are bounded by the timeout, and it uses the window.
  void finish() noexcept {
    if (in_flight_ && !in_flight_->finished) in_flight_->done.wait();
    in_flight_.reset();
  }

 private:
  struct background_op {
    std::future<void> done;
    std::exception_ptr failure;
    bool finished = false;
    bool reported = false;
    // True once finished (waiting at most `limit`); raises its error if a
    // request asks, or if no one has been told yet.
    bool settle(std::chrono::milliseconds limit, bool asked_by_request) {
      if (!finished) {
        if (done.wait_for(limit) != std::future_status::ready) return false;
        finished = true;
        try {
          done.get();
        } catch (...) {
          failure = std::current_exception();
        }
      }
      if (failure && (asked_by_request || !reported)) {
        reported = true;
        std::rethrow_exception(failure);
      }
      return true;
    }
  };

  // The queue ahead may hold non-blocking collectives, each bounded by the timeout.
  template <class Communicator>
  static std::chrono::milliseconds limit_for(const Communicator& comm) {
    return background_worker::queued_wait_limit(comm.timeout());
  }

  mutable std::shared_ptr<background_op> in_flight_;  // the get or update in flight
};

}  // namespace chorus::windows
