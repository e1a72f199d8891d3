// simgrid_transport: the Transport concept over SimGrid's S4U, so that the
// unmodified collectives run on a simulated platform (sim/ builds the
// platforms and runs the ranks: sim/run.hpp).
//
// Each rank is an S4U actor on a simulated host. A send puts the message on
// the receiver's mailbox, whose permanent receiver is that rank: the bytes
// start flowing at once (an eager protocol, as TCP and UCX's eager sends
// do), the send completes when they have crossed the simulated network, and
// the receiver matches arrived messages to its posted receives by (sender,
// tag), in order, keeping the unmatched ones. Messages leave a mailbox in
// the order they were put, so one that arrived early may wait for a slower
// one put before it to be taken; the transfers themselves overlap as the
// platform's links allow.
//
// Time: waits block the actor in simulated time (wait_any on its inbox and
// its sends), so only the network costs time; local work (reductions,
// copies, encoding) is free, and the flags of the shared-memory algorithms
// are polled every `poll_step` of simulated time. A wait's deadline is the
// communicator's, a wall-clock time point: what is left of it is spent as
// simulated time.
//
// The payload is copied, so every collective's data is real and can be
// checked against a serial reference; nothing fails or dies in a
// simulation (peer_failure is always empty).
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/core/memory_kind.hpp>
#include <chorus/transport/transport.hpp>

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::sim {

using transport::clock;
using transport::tag_t;

// What crosses a simulated link: the bytes and their envelope.
struct message {
  int source = -1;
  tag_t tag = 0;
  std::vector<std::byte> data;
};

// One operation: a send (its comm) or a receive (its buffer, then what came).
struct operation {
  bool receive = false;
  bool done = false;
  bool truncated = false;
  int peer = -1;  // -1: a receive from any source, until it matched
  tag_t tag = 0;
  std::span<std::byte> into;
  std::size_t received = 0;
  simgrid::s4u::CommPtr comm;  // a send's transfer
};

class simgrid_transport {
 public:
  class request {
   public:
    request() = default;
    bool done() const noexcept { return state_ && state_->done; }
    int peer() const noexcept { return state_ ? state_->peer : -1; }
    std::size_t received_bytes() const noexcept { return state_ ? state_->received : 0; }

   private:
    friend class simgrid_transport;
    explicit request(std::shared_ptr<operation> state) : state_(std::move(state)) {}
    std::shared_ptr<operation> state_;
  };

  // Simulated time between two looks at a shared-memory flag.
  static constexpr double poll_step = 1e-6;
  // Every simulated rank is an actor of this process: a host's shared
  // memory is made here (transport/shared_segment.hpp).
  static constexpr bool ranks_in_one_process = true;

  // `mailboxes`: every rank's inbox, this rank's among them (one table
  // for all ranks).
  simgrid_transport(int rank, std::shared_ptr<const std::vector<simgrid::s4u::Mailbox*>> mailboxes)
      : rank_(rank), inboxes_(std::move(mailboxes)) {
    inbox().set_receiver(simgrid::s4u::Actor::self());
    post_get();
  }
  simgrid_transport(const simgrid_transport&) = delete;
  simgrid_transport& operator=(const simgrid_transport&) = delete;
  ~simgrid_transport() {
    if (get_) get_->cancel();
    delete arriving_;
    inbox().set_receiver(nullptr);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(inboxes_->size()); }
  chorus::memory_kinds memory_kinds() const noexcept { return chorus::memory_kinds{memory_kind::host}; }
  chorus::memory_kind registered_kind(const void*, std::size_t) const noexcept { return memory_kind::host; }
  std::optional<int> peer_failure(int) const noexcept { return std::nullopt; }
  bool failed() const noexcept { return failed_; }
  void abandon() noexcept { failed_ = true; }
  static void set_thread_progress_mode(transport::progress_mode) noexcept {}

  // Messages and bytes this rank sent.
  std::size_t messages_sent() const noexcept { return messages_sent_; }
  std::size_t bytes_sent() const noexcept { return bytes_sent_; }

  request isend(int peer, tag_t tag, std::span<const std::byte> data,
                transport::receive_kind = transport::receive_kind::awaited) {
    check_peer(peer, "send");
    auto state = std::make_shared<operation>();
    state->peer = peer;
    state->tag = tag;
    auto* sent = new message{rank_, tag, std::vector<std::byte>(data.begin(), data.end())};
    state->comm = (*inboxes_)[static_cast<std::size_t>(peer)]->put_async(sent, data.size());
    sends_.push_back(state);
    ++messages_sent_;
    bytes_sent_ += data.size();
    return request(std::move(state));
  }

  request irecv(int peer, tag_t tag, std::span<std::byte> data,
                transport::receive_kind = transport::receive_kind::awaited) {
    check_peer(peer, "recv");
    return post_receive(peer, tag, data);
  }
  request irecv_any(tag_t tag, std::span<std::byte> data) { return post_receive(-1, tag, data); }

  // Takes what arrived and settles finished sends; true if anything did.
  bool progress() {
    bool moved = false;
    while (get_ && get_->test()) {
      moved = true;
      get_ = nullptr;
      std::unique_ptr<message> arrived(std::exchange(arriving_, nullptr));
      deliver(std::move(*arrived));
      post_get();
    }
    for (auto at = sends_.begin(); at != sends_.end();) {
      if ((*at)->comm->test()) {
        (*at)->done = true;
        (*at)->comm = nullptr;
        at = sends_.erase(at);
        moved = true;
      } else {
        ++at;
      }
    }
    return moved;
  }

  bool test(request& handle) {
    progress();
    check(handle, "test");
    return handle.done();
  }
  void wait(request& handle, clock::time_point deadline, std::string_view operation) {
    wait_all(std::span<request>(&handle, 1), deadline, operation);
  }
  void wait_all(std::span<request> handles, clock::time_point deadline, std::string_view operation) {
    const auto all_done = [&] {
      return std::all_of(handles.begin(), handles.end(), [](const request& handle) { return handle.done(); });
    };
    const bool finished = progress_until(all_done, deadline);
    for (request& handle : handles) check(handle, operation);
    if (finished) return;
    for (request& handle : handles)
      if (!handle.done()) {
        failed_ = true;
        throw error(errc::timeout,
                    std::string(handle.state_->receive ? "receive from" : "send to") +
                        " peer did not complete before the deadline (simulated time " +
                        std::to_string(simgrid::s4u::Engine::get_clock()) + " s)",
                    {rank_, handle.peer(), std::string(operation)});
      }
  }

  // Blocks in simulated time until done() or what is left of the deadline
  // has passed in simulated time.
  template <class Predicate>
  bool progress_until(Predicate&& done, clock::time_point deadline) {
    const double give_up = simgrid::s4u::Engine::get_clock() + seconds_left(deadline);
    for (;;) {
      progress();
      if (done()) return true;
      const double left = give_up - simgrid::s4u::Engine::get_clock();
      if (left <= 0) return false;
      std::vector<simgrid::s4u::CommPtr> pending;
      if (get_) pending.push_back(get_);
      for (const auto& send : sends_) pending.push_back(send->comm);
      if (pending.empty()) {
        simgrid::s4u::this_actor::sleep_for(std::min(left, poll_step));  // a condition nothing here signals
        continue;
      }
      simgrid::s4u::Comm::wait_any_for(pending, left);
    }
  }

  // A flag in memory another rank writes: looked at every poll_step.
  template <class Predicate>
  bool poll_until(Predicate&& done, clock::time_point deadline) {
    const double give_up = simgrid::s4u::Engine::get_clock() + seconds_left(deadline);
    for (;;) {
      progress();
      if (done()) return true;
      if (simgrid::s4u::Engine::get_clock() >= give_up) return false;
      simgrid::s4u::this_actor::sleep_for(poll_step);
    }
  }

 private:
  static double seconds_left(clock::time_point deadline) {
    return std::max(0.0, std::chrono::duration<double>(deadline - clock::now()).count());
  }

  simgrid::s4u::Mailbox& inbox() const { return *(*inboxes_)[static_cast<std::size_t>(rank_)]; }

  void post_get() { get_ = inbox().get_async<message>(&arriving_); }

  void check_peer(int peer, const char* operation) const {
    if (peer < 0 || peer >= size())
      throw error(errc::invalid_argument,
                  "peer " + std::to_string(peer) + " is not in [0, " + std::to_string(size()) + ")",
                  {rank_, peer, operation});
  }

  void check(const request& handle, std::string_view operation) {
    if (handle.state_ && handle.state_->truncated) {
      failed_ = true;
      throw error(errc::mismatch, "message is larger than the receive buffer",
                  {rank_, handle.peer(), std::string(operation)});
    }
  }

  request post_receive(int peer, tag_t tag, std::span<std::byte> into) {
    auto state = std::make_shared<operation>();
    state->receive = true;
    state->peer = peer;
    state->tag = tag;
    state->into = into;
    progress();
    for (auto at = unexpected_.begin(); at != unexpected_.end(); ++at)
      if (matches(*state, *at)) {
        settle(*state, std::move(*at));
        unexpected_.erase(at);
        return request(std::move(state));
      }
    posted_.push_back(state);
    return request(std::move(state));
  }

  static bool matches(const operation& wanted, const message& arrived) noexcept {
    return (wanted.peer < 0 || wanted.peer == arrived.source) && wanted.tag == arrived.tag;
  }

  static void settle(operation& receive, message&& arrived) {
    receive.peer = arrived.source;
    receive.received = std::min(arrived.data.size(), receive.into.size());
    receive.truncated = arrived.data.size() > receive.into.size();
    if (receive.received > 0) std::memcpy(receive.into.data(), arrived.data.data(), receive.received);
    receive.done = true;
  }

  // The first posted receive it matches, in posting order; else kept.
  void deliver(message&& arrived) {
    for (auto at = posted_.begin(); at != posted_.end(); ++at)
      if (matches(**at, arrived)) {
        settle(**at, std::move(arrived));
        posted_.erase(at);
        return;
      }
    unexpected_.push_back(std::move(arrived));
  }

  int rank_;
  std::shared_ptr<const std::vector<simgrid::s4u::Mailbox*>> inboxes_;
  simgrid::s4u::CommPtr get_;
  message* arriving_ = nullptr;  // where the inbox's get puts what it takes
  std::deque<std::shared_ptr<operation>> posted_;
  std::deque<message> unexpected_;
  std::vector<std::shared_ptr<operation>> sends_;
  std::size_t messages_sent_ = 0, bytes_sent_ = 0;
  bool failed_ = false;
};

static_assert(transport::Transport<simgrid_transport>);

}  // namespace chorus::sim
