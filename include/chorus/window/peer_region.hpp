// A peer's exposed window memory, as this rank reaches it: mapped into this
// process when the peer is on this host (plain loads and stores, atomics
// for the counters), else by chorus messages its owner's progress thread
// applies (relay.hpp), or by the transport's one-sided operations
// (transport/one_sided.hpp: UCX RMA where asked, CHORUS_WINDOW_NETWORK=rma).
// The slot protocol (slot.hpp) is written once against these few operations.
//
// Ordering: increment() and write() take effect at the peer in the order
// they are called (a release atomic here; the owner's order of ops over
// messages; the transport's fence before each one over RMA); load() and read()
// complete before they return, in order. Writes over the network complete
// locally later: wait() before the bytes written may change, flush() before
// they must have landed.
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/transport/one_sided.hpp>
#include <chorus/window/relay.hpp>
#include <chorus/window/slot.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

namespace chorus::windows {

// How a neighbour's region is reached.
enum class reach { mapped, messages, rma };

template <transport::OneSided Transport>
class peer_region {
 public:
  using request = typename Transport::request;
  using remote_memory = typename Transport::remote_memory;

  // `memory`: the peer's card, reached (its mapping is used only when `how`
  // is mapped); `tags`: the relay's, when `how` is messages.
  peer_region(Transport& network, int world_peer, remote_memory memory, reach how, relay_tags tags = {})
      : network_(&network),
        peer_(world_peer),
        memory_(std::move(memory)),
        direct_(how == reach::mapped ? memory_.direct() : nullptr),
        how_(how),
        tags_(tags) {}

  int world_rank() const noexcept { return peer_; }
  bool mapped() const noexcept { return direct_ != nullptr; }

  // Adds one to the counter at `offset`, after every earlier write here.
  void increment(std::size_t offset) {
    if (direct_ != nullptr) {
      counter_at(direct_, offset).fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    if (how_ == reach::messages) return send({relay_kind::increment, 0, offset, sizeof(std::uint64_t)});
    network_->fence();
    in_flight_.push_back(network_->atomic_add(peer_, memory_, offset, one));
  }

  // Writes `bytes` at `offset`; over the network they must stay unchanged
  // until wait().
  void write(std::size_t offset, std::span<const std::byte> bytes) {
    if (direct_ != nullptr) return copy_racing(direct_ + offset, bytes.data(), bytes.size());
    if (how_ == reach::messages) {
      send({relay_kind::write, 0, offset, bytes.size()});
      in_flight_.push_back(network_->isend(peer_, tags_.payload, bytes));
      return;
    }
    network_->fence();
    in_flight_.push_back(network_->put(peer_, memory_, offset, bytes));
  }

  // Where write() would put bytes at `offset` when the region is mapped
  // here (a codec may encode straight into it), else null.
  std::byte* mapped_at(std::size_t offset) const noexcept { return direct_ == nullptr ? nullptr : direct_ + offset; }

  // The counter at `offset`, read after everything read before it.
  std::uint64_t load(std::size_t offset, transport::clock::time_point deadline) {
    if (direct_ != nullptr) {
      std::atomic_thread_fence(std::memory_order_acquire);
      return counter_at(direct_, offset).load(std::memory_order_acquire);
    }
    std::uint64_t value = 0;
    if (how_ == reach::messages) {
      ask({relay_kind::load, 0, offset, sizeof value}, std::as_writable_bytes(std::span(&value, 1)), deadline,
          "window read");
      return value;
    }
    request fetch = network_->atomic_add(peer_, memory_, offset, zero, &value);
    network_->wait(fetch, deadline, "window read");
    return value;
  }

  // The same without waiting: true, with `value`, once a load of the
  // counter at `offset` started by an earlier call (or this one) has come
  // back; false while it is on its way. One at a time per region.
  bool try_load(std::size_t offset, std::uint64_t& value) {
    if (direct_ != nullptr) {
      value = load(offset, {});
      return true;
    }
    if (!loading_) start_load(offset);
    for (request& part : loading_->exchange)
      if (!network_->test(part)) return false;  // an unused one is done
    value = loading_->value;
    loading_.reset();
    return true;
  }

  void read(std::size_t offset, std::span<std::byte> out, transport::clock::time_point deadline) {
    if (direct_ != nullptr) return copy_racing(out.data(), direct_ + offset, out.size());
    if (how_ == reach::messages) return ask({relay_kind::read, 0, offset, out.size()}, out, deadline, "window read");
    request get = network_->get(peer_, memory_, offset, out);
    network_->wait(get, deadline, "window read");
  }

  // Every write() and increment() so far completed here (their buffers are
  // free again).
  void wait(transport::clock::time_point deadline) {
    if (in_flight_.empty()) return;
    network_->wait_all(std::span<request>(in_flight_), deadline, "window write");
    sent_done();
  }
  bool test() {
    for (request& pending : in_flight_)
      if (!network_->test(pending)) return false;
    sent_done();
    return true;
  }

  // ... and landed at the peer.
  void flush(transport::clock::time_point deadline) {
    wait(deadline);
    if (mapped()) return;
    if (how_ == reach::messages) return ask({relay_kind::flush, 0, 0, 0}, {}, deadline, "window flush");
    request flushed = network_->flush(peer_);
    network_->wait(flushed, deadline, "window flush");
  }

  // Lets go of the operations in flight (a dead peer's: they cannot complete).
  void abandon() noexcept {
    sent_done();
    loading_.reset();
  }

 private:
  static constexpr std::uint64_t one = 1;  // what increment() adds: it must outlive the request
  static constexpr std::uint64_t zero = 0;

  // An op to the owner's relay, kept here until its send completes.
  void send(const relay_op& op) {
    const relay_op& kept = ops_.emplace_back(op);
    in_flight_.push_back(network_->isend(peer_, tags_.request, std::as_bytes(std::span(&kept, 1))));
  }
  // An op the owner answers, and its answer in `out` (both waited for here).
  void ask(relay_op op, std::span<std::byte> out, transport::clock::time_point deadline, const char* operation) {
    request exchange[2] = {network_->irecv(peer_, tags_.reply, out),
                           network_->isend(peer_, tags_.request, std::as_bytes(std::span(&op, 1)))};
    network_->wait_all(std::span<request>(exchange), deadline, operation);
  }
  void sent_done() noexcept {
    in_flight_.clear();
    ops_.clear();
  }
  // A load's request(s): its reply lands in `value` (a node: it must not
  // move while in flight). Relay replies come in the order asked, so one
  // overtaken by a blocking ask() is still matched to its own receive.
  struct pending_load {
    std::uint64_t value = 0;
    request exchange[2];
    relay_op op{};
  };
  void start_load(std::size_t offset) {
    loading_ = std::make_unique<pending_load>();
    pending_load& load = *loading_;
    if (how_ == reach::messages) {
      load.op = {relay_kind::load, 0, offset, sizeof load.value};
      // Standing: the window may go on to other waits while it is out, and a
      // peer that dies meanwhile fails a test of it alone (transport.hpp).
      constexpr auto standing = transport::receive_kind::standing;
      load.exchange[0] =
          network_->irecv(peer_, tags_.reply, std::as_writable_bytes(std::span(&load.value, 1)), standing);
      load.exchange[1] = network_->isend(peer_, tags_.request, std::as_bytes(std::span(&load.op, 1)), standing);
      return;
    }
    load.exchange[0] = network_->atomic_add(peer_, memory_, offset, zero, &load.value);
  }

  Transport* network_;
  int peer_;
  remote_memory memory_;
  std::byte* direct_;
  reach how_;
  relay_tags tags_;
  std::vector<request> in_flight_;
  std::deque<relay_op> ops_;               // the relay ops in flight
  std::unique_ptr<pending_load> loading_;  // try_load()'s, while on its way
};

}  // namespace chorus::windows
