// A UCX operation's state and its handle.
//
// The state lives in the request UCX allocates for the operation (the
// context reserves sizeof(operation_state) in every request: request_size),
// so a send or receive costs no heap allocation. An operation that UCX
// completes inside the call has no request; its handle keeps the status.
//
// Ownership: the handle and the completion callback each hold a reference
// to a pending request; whoever lets go last puts the state back to its
// initial value and frees the request, so dropping a pending request can
// never make the callback write into memory that UCX has reused. (UCX runs
// request_init only when it first allocates a request's memory, not on
// reuse: hence the reset before every free.)
#pragma once

#include <chorus/transport/transport.hpp>

#include <ucp/api/ucp.h>

#include <atomic>
#include <cstddef>
#include <new>
#include <utility>

namespace chorus::ucx {

using transport::tag_t;

namespace detail {

struct operation_state {
  std::atomic<int> references{2};  // the handle's and the callback's
  std::atomic<ucs_status_t> status{UCS_INPROGRESS};
  // Whether it still counts in its peer's operations in flight: until it
  // ends, or until its handle lets go of it unfinished (whichever is first
  // uncounts it, once).
  std::atomic<bool> counted{true};
  std::size_t received = 0;
  int sender = -1;  // a receive's sender, from the tag that matched

  void recycle() noexcept {
    references.store(2, std::memory_order_relaxed);
    status.store(UCS_INPROGRESS, std::memory_order_relaxed);
    counted.store(true, std::memory_order_relaxed);
    received = 0;
    sender = -1;
  }
};

// The context's request_init: first use of a request's memory.
inline void initialise_request(void* request) noexcept { new (request) operation_state(); }

// Drops one reference; true when it was the last (the caller frees).
inline bool let_go(operation_state* state) noexcept {
  if (state->references.fetch_sub(1, std::memory_order_acq_rel) != 1) return false;
  state->recycle();
  return true;
}

// The callbacks' user_data: the peer's count of operations in flight (of
// its kind: standing receives are counted apart).
inline void finish(void* request, ucs_status_t status, std::size_t received, int sender, void* in_flight) noexcept {
  auto* state = static_cast<operation_state*>(request);
  if (state->counted.exchange(false, std::memory_order_acq_rel))
    static_cast<std::atomic<int>*>(in_flight)->fetch_sub(1, std::memory_order_acq_rel);
  state->received = received;
  state->sender = sender;
  state->status.store(status, std::memory_order_release);
  if (let_go(state)) ucp_request_free(request);  // inside progress: the worker is held
}

inline void on_send_done(void* request, ucs_status_t status, void* in_flight) {
  finish(request, status, 0, -1, in_flight);
}

// The sender's rank is the tag's top bits (ucx_transport.hpp, wire_tag).
inline void on_recv_done(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* in_flight) {
  const bool ok = status == UCS_OK;
  finish(request, status, ok ? info->length : 0,
         ok ? static_cast<int>(info->sender_tag >> transport::user_tag_bits) : -1, in_flight);
}

}  // namespace detail

class ucx_transport;

class request {
 public:
  request() = default;
  request(request&& other) noexcept { *this = std::move(other); }
  request& operator=(request&& other) noexcept {
    if (this != &other) {
      reset();
      owner_ = std::exchange(other.owner_, nullptr);
      state_ = std::exchange(other.state_, nullptr);
      settled_ = other.settled_;
      peer_ = other.peer_;
      tag_ = other.tag_;
      is_receive_ = other.is_receive_;
      standing_ = other.standing_;
    }
    return *this;
  }
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  ~request() { reset(); }

  bool done() const noexcept { return status() != UCS_INPROGRESS; }
  bool succeeded() const noexcept { return status() == UCS_OK; }
  // The peer; for a receive from any source, the sender once it completed
  // (-1 before).
  int peer() const noexcept {
    if (peer_ >= 0 || state_ == nullptr || !done()) return peer_;
    return state_->sender;
  }
  bool from_any_source() const noexcept { return is_receive_ && peer_ < 0; }
  tag_t tag() const noexcept { return tag_; }
  bool is_receive() const noexcept { return is_receive_; }
  bool is_standing() const noexcept { return standing_; }
  std::size_t received_bytes() const noexcept { return state_ ? state_->received : 0; }
  ucs_status_t status() const noexcept { return state_ ? state_->status.load(std::memory_order_acquire) : settled_; }

  // Cancels a pending operation (bounded wait for UCX to acknowledge) and
  // lets go of its request.
  inline void reset() noexcept;

 private:
  friend class ucx_transport;
  ucx_transport* owner_ = nullptr;
  detail::operation_state* state_ = nullptr;  // the UCX request, while there is one
  ucs_status_t settled_ = UCS_OK;             // how it ended, when UCX kept no request
  int peer_ = -1;
  tag_t tag_ = 0;
  bool is_receive_ = false;
  bool standing_ = false;  // a standing receive (transport.hpp, receive_kind)
};

}  // namespace chorus::ucx
