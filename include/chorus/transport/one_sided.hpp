// The OneSided concept: memory a peer reads and writes without this rank's
// help, beside the tagged messages of transport.hpp.
//
//   auto mine = network.expose(bytes);                 // zeroed, registered
//   ...send mine.card() to the peers...
//   auto theirs = network.reach(peer, card);           // the peer's region
//   theirs.direct()                                    // a pointer, when mapped here
//   network.put(peer, theirs, offset, bytes); network.fence();
//   network.atomic_add(peer, theirs, offset, one);     // lands after the put
//   network.wait(network.flush(peer), deadline, "window flush");
//
// Puts, gets and atomics complete locally (their buffers are free again);
// fence() orders this rank's earlier operations before its later ones at
// every target; flush(peer) completes once they all landed there. A region
// another rank may still write after a failure is retire()d: the transport
// frees it when it goes. Implemented by ucx_transport (UCP RMA,
// ucx/remote_memory.hpp) and by the simulated transport (simgrid_transport:
// simulated transfers between the hosts, applied in order at the target).
#pragma once

#include <chorus/transport/transport.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

namespace chorus::transport {

template <class T>
concept OneSided =
    Transport<T> && std::movable<typename T::exposed_memory> && std::movable<typename T::remote_memory> &&
    requires(T& transport, int peer, std::size_t bytes, std::size_t offset, std::span<std::byte> memory,
             std::shared_ptr<void> owner, std::span<const std::byte> input, std::span<std::byte> output,
             typename T::exposed_memory& mine, const typename T::remote_memory& theirs, const std::uint64_t& value,
             std::uint64_t* fetched, typename T::request& request, clock::time_point deadline,
             std::string_view operation) {
      // A region of `bytes` zeroed bytes this rank exposes, or memory the
      // caller allocated (device memory) kept alive by `owner`.
      { transport.expose(bytes) } -> std::same_as<typename T::exposed_memory>;
      { transport.expose(memory, owner) } -> std::same_as<typename T::exposed_memory>;
      { mine.data() } -> std::same_as<std::byte*>;
      { mine.size() } -> std::same_as<std::size_t>;
      // What a peer needs to reach it (it travels as bytes).
      { mine.card() } -> std::same_as<std::vector<std::byte>>;
      // A peer's region from its card; direct(): mapped into this process
      // (plain loads and stores reach it), or null.
      { transport.reach(peer, input) } -> std::same_as<typename T::remote_memory>;
      { theirs.direct() } -> std::same_as<std::byte*>;
      { transport.retire(std::move(mine)) } -> std::same_as<void>;
      { transport.put(peer, theirs, offset, input) } -> std::same_as<typename T::request>;
      { transport.get(peer, theirs, offset, output) } -> std::same_as<typename T::request>;
      // Adds `value` to the 8-byte word at `offset`; with `fetched`, the
      // word's previous value there once the request completes.
      { transport.atomic_add(peer, theirs, offset, value, fetched) } -> std::same_as<typename T::request>;
      { transport.fence() } -> std::same_as<void>;
      { transport.flush(peer) } -> std::same_as<typename T::request>;
      { transport.wait(request, deadline, operation) } -> std::same_as<void>;
      // Whether a peer has died, asked now: a peer reached through mapped
      // memory is read and written without the network, which alone would
      // notice.
      { transport.peer_gone_now(peer) } -> std::same_as<bool>;
      // Whether a remote access completes only while the target's own
      // network is progressed (UCX over TCP emulates RMA with messages its
      // worker answers): then a window keeps a progress thread running, or
      // relays its operations as messages (window/relay.hpp).
      { T::remote_access_needs_target_progress } -> std::convertible_to<bool>;
    };

}  // namespace chorus::transport
