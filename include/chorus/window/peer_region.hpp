// A peer's exposed window memory, as this rank reaches it: mapped into this
// process when the peer is on this host (plain loads and stores, atomics
// for the counters), else by UCX RMA over the network. The slot protocol
// (slot.hpp) is written once against these few operations.
//
// Ordering: increment() and write() take effect at the peer in the order
// they are called (a release atomic here; a UCX fence before each one over
// the network); load() and read() complete before they return, in order.
// Writes over the network complete locally later: wait() before the bytes
// written may change, flush() before they must have landed.
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/transport/ucx/remote_memory.hpp>
#include <chorus/window/slot.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace chorus::windows {

template <class Transport>
class peer_region {
 public:
  using request = typename Transport::request;

  peer_region(Transport& network, int world_peer, std::span<const std::byte> card)
      : network_(&network), peer_(world_peer), memory_(network.reach(world_peer, card)) {}

  int world_rank() const noexcept { return peer_; }
  bool mapped() const noexcept { return memory_.direct() != nullptr; }

  // Adds one to the counter at `offset`, after every earlier write here.
  void increment(std::size_t offset) {
    if (std::byte* direct = memory_.direct()) {
      counter_at(direct, offset).fetch_add(1, std::memory_order_acq_rel);
      return;
    }
    network_->fence();
    in_flight_.push_back(network_->atomic_add(peer_, memory_, offset, one));
  }

  // Writes `bytes` at `offset`; over the network they must stay unchanged
  // until wait().
  void write(std::size_t offset, std::span<const std::byte> bytes) {
    if (std::byte* direct = memory_.direct()) return copy_racing(direct + offset, bytes.data(), bytes.size());
    network_->fence();
    in_flight_.push_back(network_->put(peer_, memory_, offset, bytes));
  }

  // Where write() would put bytes at `offset` when the region is mapped
  // here (a codec may encode straight into it), else null.
  std::byte* mapped_at(std::size_t offset) const noexcept {
    return memory_.direct() == nullptr ? nullptr : memory_.direct() + offset;
  }

  // The counter at `offset`, read after everything read before it.
  std::uint64_t load(std::size_t offset, transport::clock::time_point deadline) {
    if (std::byte* direct = memory_.direct()) {
      std::atomic_thread_fence(std::memory_order_acquire);
      return counter_at(direct, offset).load(std::memory_order_acquire);
    }
    std::uint64_t value = 0;
    request fetch = network_->atomic_add(peer_, memory_, offset, zero, &value);
    network_->wait(fetch, deadline, "window read");
    return value;
  }

  void read(std::size_t offset, std::span<std::byte> out, transport::clock::time_point deadline) {
    if (std::byte* direct = memory_.direct()) return copy_racing(out.data(), direct + offset, out.size());
    request get = network_->get(peer_, memory_, offset, out);
    network_->wait(get, deadline, "window read");
  }

  // Every write() and increment() so far completed here (their buffers are
  // free again).
  void wait(transport::clock::time_point deadline) {
    if (in_flight_.empty()) return;
    network_->wait_all(std::span<request>(in_flight_), deadline, "window write");
    in_flight_.clear();
  }
  bool test() {
    for (request& pending : in_flight_)
      if (!network_->test(pending)) return false;
    in_flight_.clear();
    return true;
  }

  // ... and landed at the peer.
  void flush(transport::clock::time_point deadline) {
    wait(deadline);
    if (mapped()) return;
    request flushed = network_->flush(peer_);
    network_->wait(flushed, deadline, "window flush");
  }

  // Lets go of the operations in flight (a dead peer's: they cannot complete).
  void abandon() noexcept { in_flight_.clear(); }

 private:
  static constexpr std::uint64_t one = 1;  // what increment() adds: it must outlive the request
  static constexpr std::uint64_t zero = 0;

  Transport* network_;
  int peer_;
  ucx::remote_memory memory_;
  std::vector<request> in_flight_;
};

}  // namespace chorus::windows
