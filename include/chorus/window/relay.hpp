// Window memory on another host, reached by chorus's own messages: each
// operation peer_region makes on a neighbour's region (add one to a
// counter, write bytes, load a counter, read bytes, flush) is a request the
// region's owner applies to its own memory on its progress thread, as a
// writer on its host would with loads and stores. The requester never waits
// for the owner's trainer, only for its progress thread: a write costs two
// sends, a load, a read or a flush one round trip.
//
// Why not UCX RMA: over TCP UCX emulates RMA the same way, but its
// emulation aborts the process when a neighbour dies with operations queued
// to it or answers one over an endpoint that timed out (UCX 1.13), where a
// chorus message to a dead peer is a peer_failure like any other.
// CHORUS_WINDOW_NETWORK=rma uses UCX RMA instead (hardware RMA: InfiniBand,
// RoCE).
//
// Protocol, per (requester, owner), on three tags of the window's own
// communicator: `request` carries a relay_op, `payload` a write's bytes
// (sent right after its op), `reply` a load's 8 bytes, a read's bytes or a
// flush's empty message. The owner applies one requester's ops in the order
// sent, and a write's bytes before the op after it, so operations land in
// the order they are made (peer_region's guarantee) and a flush's reply
// means everything sent before it has landed.
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/transport/transport.hpp>
#include <chorus/window/slot.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <vector>

namespace chorus::windows {

enum class relay_kind : std::uint32_t { increment = 1, write = 2, load = 3, read = 4, flush = 5 };

struct relay_op {
  relay_kind what{};
  std::uint32_t reserved = 0;
  std::uint64_t offset = 0;  // into the owner's region
  std::uint64_t bytes = 0;   // written or read
};
static_assert(sizeof(relay_op) == 24, "the relay op is part of the wire format");

struct relay_tags {
  transport::tag_t request = 0;
  transport::tag_t payload = 0;
  transport::tag_t reply = 0;
};

// The owner's side: serves every requester that reaches its region by
// messages. serve() runs on the progress thread; a requester that died or
// left is served what it sent before (a rank that finished its rounds and
// left has its last entries applied), then forgotten: settled(peer) says
// so, and until then its death is not final for the window. A malformed op
// is an error serve() throws (the progress thread keeps it for the window).
template <class Transport>
class relay_server {
 public:
  using request = typename Transport::request;

  // `requesters`: world ranks; `rank`: this one's, for errors.
  relay_server(Transport& network, std::span<std::byte> memory, relay_tags tags, const std::vector<int>& requesters,
               int rank)
      : network_(&network), memory_(memory), tags_(tags), rank_(rank) {
    for (int peer : requesters) {
      requester& from = requesters_.emplace_back();
      from.peer = peer;
      post_next(from);
    }
  }

  // Applies what arrived; true if anything was.
  bool serve() {
    bool worked = false;
    for (requester& from : requesters_) {
      if (from.settled.load(std::memory_order_relaxed)) continue;
      try {
        while (serve_one(from)) worked = true;
      } catch (const error& failure) {
        if (failure.category() != errc::peer_failure) throw;
        forget(from);
        continue;
      }
      if (network_->peer_failure(from.peer)) forget(from);  // all it sent is applied: nothing more comes
    }
    return worked;
  }

  // Whether `world_peer` is served no more (or never was): after its
  // death, once what it sent before is applied.
  bool settled(int world_peer) const noexcept {
    for (const requester& from : requesters_)
      if (from.peer == world_peer) return from.settled.load(std::memory_order_acquire);
    return true;
  }

 private:
  struct reply {
    std::uint64_t value = 0;  // a load's answer, kept until sent
    request sent;
  };
  struct requester {
    int peer = -1;
    relay_op next_op{};
    request next;  // the next op (standing: the requester may never send one)
    request payload;
    bool writing = false;  // a write's bytes are landing: the next op waits
    std::deque<reply> replies;
    std::atomic<bool> settled{false};  // forgotten (dead or gone); the window's thread reads it too
  };

  void post_next(requester& from) {
    from.next = network_->irecv(from.peer, tags_.request, std::as_writable_bytes(std::span(&from.next_op, 1)),
                                transport::receive_kind::standing);
  }

  bool serve_one(requester& from) {
    while (!from.replies.empty() && completed(from, from.replies.front().sent)) from.replies.pop_front();
    if (from.writing) {
      if (!completed(from, from.payload)) return false;
      from.writing = false;
      from.payload = {};
    }
    if (!completed(from, from.next)) return false;
    const relay_op op = checked(from);
    post_next(from);
    apply(from, op);
    return true;
  }

  // Whether `operation` is over; one of a requester that died or left only
  // if it was before (no error: what it sent before is still served).
  bool completed(const requester& from, request& operation) {
    if (!operation.done() && network_->peer_failure(from.peer)) return false;
    return network_->test(operation);
  }

  void apply(requester& from, const relay_op& op) {
    const auto bytes = [&] { return memory_.subspan(op.offset, op.bytes); };
    switch (op.what) {
      case relay_kind::increment: counter_at(memory_.data(), op.offset).fetch_add(1, std::memory_order_acq_rel); return;
      case relay_kind::write:
        from.payload = network_->irecv(from.peer, tags_.payload, bytes(), transport::receive_kind::standing);
        from.writing = true;
        return;
      case relay_kind::load: {
        reply& answer = from.replies.emplace_back();
        answer.value = counter_at(memory_.data(), op.offset).load(std::memory_order_acquire);
        answer.sent = network_->isend(from.peer, tags_.reply, std::as_bytes(std::span(&answer.value, 1)));
        return;
      }
      case relay_kind::read:
        std::atomic_thread_fence(std::memory_order_acquire);
        from.replies.emplace_back().sent = network_->isend(from.peer, tags_.reply, bytes());
        return;
      case relay_kind::flush: from.replies.emplace_back().sent = network_->isend(from.peer, tags_.reply, {}); return;
    }
  }

  // The op just received, checked: whole, of a known kind, inside the
  // region, a counter 8-byte aligned.
  relay_op checked(const requester& from) const {
    const relay_op op = from.next_op;
    const bool whole = from.next.received_bytes() == sizeof op;
    const bool known = op.what >= relay_kind::increment && op.what <= relay_kind::flush;
    const bool counter = op.what == relay_kind::increment || op.what == relay_kind::load;
    const std::uint64_t bytes = counter ? sizeof(std::uint64_t) : op.bytes;
    const bool inside = op.offset <= memory_.size() && bytes <= memory_.size() - op.offset;
    if (!whole || !known || !inside || (counter && op.offset % sizeof(std::uint64_t) != 0))
      throw error(errc::mismatch,
                  "window relay: a request of " + std::to_string(from.next.received_bytes()) + " bytes (kind " +
                      std::to_string(static_cast<std::uint32_t>(op.what)) + ", bytes [" + std::to_string(op.offset) +
                      ", +" + std::to_string(op.bytes) + ")) that is not an operation on this window of " +
                      std::to_string(memory_.size()) + " bytes",
                  {rank_, from.peer, "window relay"});
    return op;
  }

  // A dead requester: its requests are let go of (cancelled, bounded).
  void forget(requester& from) noexcept {
    from.next = {};
    from.payload = {};
    from.writing = false;
    from.replies.clear();
    from.settled.store(true, std::memory_order_release);
  }

  Transport* network_;
  std::span<std::byte> memory_;
  relay_tags tags_;
  int rank_;
  std::deque<requester> requesters_;  // stable: requests point into them
};

}  // namespace chorus::windows
