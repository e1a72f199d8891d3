// The transport's view of each peer: its endpoint, whether and how it
// failed, its process when it runs on this host, and how many operations
// with it are in flight.
//
// Failure detection: UCX reports a dead peer through the endpoint error
// handler (TCP reset, keepalive); for peers on this host the table also
// watches the peer's process (peer_process.hpp) every `watch_interval`
// while anyone progresses, which UCX's shared-memory transports do not do
// well. A failed peer's endpoint is force-closed at once, so sends to it
// complete with an error instead of waiting for a flush.
//
// Callers hold the transport's lock for everything that touches endpoints;
// the failure fields are atomics, read without it.
#pragma once

#include <chorus/transport/peer_process.hpp>
#include <chorus/transport/transport.hpp>
#include <chorus/transport/ucx/waiting.hpp>

#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace chorus::ucx {

using transport::clock;

class peer_table;

struct peer_slot {
  peer_table* table = nullptr;
  int rank = -1;
  ucp_ep_h endpoint = nullptr;
  std::atomic<bool> reached{false};      // an endpoint was made (it may have closed since, on failure)
  std::atomic<bool> unreachable{false};  // a receive's connect failed: receives no longer try (sends do)
  std::atomic<ucs_status_t> failure{UCS_OK};
  std::optional<transport::process_identity> process;  // watched when on this host
  std::atomic<bool> process_exited{false};
  std::atomic<int> in_flight{0};  // operations with this peer not yet over, standing receives aside
  std::atomic<int> standing{0};   // standing receives from this peer not yet over
};

class peer_table {
 public:
  static constexpr auto watch_interval = std::chrono::milliseconds(100);

  explicit peer_table(int ranks) : ranks_(ranks), slots_(new peer_slot[static_cast<std::size_t>(ranks)]) {
    for (int peer = 0; peer < ranks; ++peer) {
      (*this)[peer].table = this;
      (*this)[peer].rank = peer;
    }
  }

  int size() const noexcept { return ranks_; }
  peer_slot& operator[](int peer) noexcept { return slots_[static_cast<std::size_t>(peer)]; }
  const peer_slot& operator[](int peer) const noexcept { return slots_[static_cast<std::size_t>(peer)]; }

  // The endpoint error handler; runs inside ucp_worker_progress, so it only
  // records: the endpoint is closed by close_failed_endpoints afterwards.
  static void on_endpoint_error(void* slot, ucp_ep_h, ucs_status_t status) {
    mark_failed(*static_cast<peer_slot*>(slot), status);
  }

  static void mark_failed(peer_slot& slot, ucs_status_t status) noexcept {
    ucs_status_t expected = UCS_OK;
    if (slot.failure.compare_exchange_strong(expected, status, std::memory_order_acq_rel))
      slot.table->failed_peers_.fetch_add(1, std::memory_order_acq_rel);
    slot.table->failures_pending_.store(true, std::memory_order_release);
  }

  // The failure UCX reported for a peer, if any.
  std::optional<ucs_status_t> failure(int peer) const noexcept {
    const ucs_status_t status = (*this)[peer].failure.load(std::memory_order_acquire);
    if (status == UCS_OK) return std::nullopt;
    return status;
  }

  // Whether the peer has failed, asking the kernel now if its process is
  // watched (an error status from UCX may arrive before the next watch).
  bool gone(int peer) {
    check_process((*this)[peer]);
    return failure(peer).has_value();
  }

  // A failed peer with operations still in flight: they can never complete,
  // and whatever the caller waits for depends on them (a collective waits on
  // one peer while its exchange with the dead one is pending), so every wait
  // fails. A peer that finished and left has nothing in flight: no error.
  // Standing receives do not count: a scheme posts them for messages that
  // may never come, so a peer that finished and left still has one pending
  // here (transport.hpp, receive_kind).
  int doomed() const noexcept {
    if (failed_peers_.load(std::memory_order_acquire) == 0) return -1;
    for (int peer = 0; peer < ranks_; ++peer)
      if ((*this)[peer].failure.load(std::memory_order_acquire) != UCS_OK &&
          (*this)[peer].in_flight.load(std::memory_order_acquire) > 0)
        return peer;
    return -1;
  }
  bool any_failed() const noexcept { return failed_peers_.load(std::memory_order_acquire) > 0; }
  bool failures_pending() const noexcept { return failures_pending_.load(std::memory_order_acquire); }

  // With the lock held: checks the watched processes at most once per
  // watch_interval, then closes what failed. A peer's last messages may
  // reach this worker just before its death is seen (written, then the
  // process exits between two polls): `drain()` progresses the worker before
  // the peer counts as failed, so they are received, not lost. One drain is
  // enough: the writes happened before the death that was observed.
  template <class Drain>
  void watch(clock::time_point now, Drain&& drain, std::vector<void*>& closing) {
    if (now - last_watch_ < watch_interval) return;
    last_watch_ = now;
    bool exited = false;
    for (int peer = 0; peer < ranks_; ++peer) exited |= notice_exit((*this)[peer]);
    if (exited) {
      drain();
      for (int peer = 0; peer < ranks_; ++peer) {
        peer_slot& slot = (*this)[peer];
        if (slot.process_exited.load(std::memory_order_acquire) &&
            slot.failure.load(std::memory_order_acquire) == UCS_OK)
          mark_failed(slot, UCS_ERR_CONNECTION_RESET);
      }
    }
    if (failures_pending()) close_failed_endpoints(closing);
  }

  // With the lock held: force-closes the endpoints of failed peers, so UCX
  // completes their outstanding operations with an error now; the close
  // requests go to `closing`, freed at teardown.
  void close_failed_endpoints(std::vector<void*>& closing) {
    failures_pending_.store(false, std::memory_order_release);
    for (int peer = 0; peer < ranks_; ++peer) {
      peer_slot& slot = (*this)[peer];
      if (slot.endpoint == nullptr || slot.failure.load(std::memory_order_acquire) == UCS_OK) continue;
      if (void* request = close(slot, true)) closing.push_back(request);
    }
  }

  // With the lock held: starts closing every endpoint still open, flushing
  // unless `force`; the close requests go to `closing`.
  void close_all(bool force, std::vector<void*>& closing) {
    for (int peer = 0; peer < ranks_; ++peer)
      if ((*this)[peer].endpoint != nullptr)
        if (void* request = close((*this)[peer], force)) closing.push_back(request);
  }

  // Starts closing the endpoint; the request to wait on, or nullptr.
  static void* close(peer_slot& slot, bool force) {
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    params.flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    const ucs_status_ptr_t result = ucp_ep_close_nbx(slot.endpoint, &params);
    slot.endpoint = nullptr;
    return UCS_PTR_IS_PTR(result) ? result : nullptr;
  }

  std::string failure_text(int peer) const {
    const peer_slot& slot = (*this)[peer];
    if (slot.process_exited.load(std::memory_order_acquire))
      return "its process (pid " + std::to_string(slot.process->pid) + " on this host) has exited";
    return ucs_status_string(slot.failure.load(std::memory_order_acquire));
  }

 private:
  // Marks the peer failed if its watched process is gone.
  static void check_process(peer_slot& slot) {
    if (notice_exit(slot)) mark_failed(slot, UCS_ERR_CONNECTION_RESET);
  }

  // True if the watched process of a peer not yet failed has exited.
  static bool notice_exit(peer_slot& slot) {
    if (!slot.process || slot.failure.load(std::memory_order_acquire) != UCS_OK) return false;
    if (transport::process_alive(*slot.process)) return false;
    slot.process_exited.store(true, std::memory_order_release);
    return true;
  }

  int ranks_;
  std::unique_ptr<peer_slot[]> slots_;         // not moved: endpoints' error handlers point into it
  std::atomic<bool> failures_pending_{false};  // a failed peer's endpoint awaits its force-close
  std::atomic<int> failed_peers_{0};
  clock::time_point last_watch_{};
};

// Progresses the worker until every close request completes or the
// deadline passes, then frees them: teardown waits a bounded time.
inline void finish_closing(ucp_worker_h worker, std::mutex& lock, std::vector<void*>& closing,
                           clock::time_point deadline) {
  const auto poll = [&] {
    std::lock_guard held(lock);
    return ucp_worker_progress(worker) != 0;
  };
  for (void* request : closing) {
    const auto closed = [&] {
      std::lock_guard held(lock);
      return ucp_request_check_status(request) != UCS_INPROGRESS;
    };
    wait_until(progress_mode::spin, closed, deadline, poll, [](clock::time_point) {}, [](clock::duration) {});
    std::lock_guard held(lock);
    ucp_request_free(request);
  }
  closing.clear();
}

}  // namespace chorus::ucx
