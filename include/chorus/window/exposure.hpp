// How a window's ranks reach each other's memory, agreed at creation: each
// rank sends every neighbour the card of the memory it exposed
// (transport/one_sided.hpp) and learns theirs, then each pair agrees on the
// way one reaches the other: mapped when each of the pair maps the other's
// memory, else by messages the owner's progress thread applies (relay.hpp)
// or by one-sided operations (CHORUS_WINDOW_NETWORK=rma, or a transport
// whose remote accesses need no help from the target, which gains nothing
// from a relay). A pair must agree: a relayed neighbour needs its owner to
// serve it. Cost: two rounds of one message to each neighbour.
#pragma once

#include <chorus/core/variables.hpp>
#include <chorus/transport/transport.hpp>
#include <chorus/window/peer_region.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace chorus::windows {

inline constexpr std::size_t max_card_bytes = 4096;

// Sends `card` to every neighbour and returns theirs, in the same order.
template <class Communicator>
std::vector<std::vector<std::byte>> trade_cards(Communicator& comm, const std::vector<int>& neighbours,
                                                const std::vector<std::byte>& card, transport::tag_t tag) {
  std::vector<std::vector<std::byte>> cards(neighbours.size(), std::vector<std::byte>(max_card_bytes));
  std::vector<typename Communicator::request> requests;
  for (std::size_t k = 0; k < neighbours.size(); ++k) {
    requests.push_back(comm.irecv_bytes(cards[k], neighbours[k], tag));
    requests.push_back(comm.isend_bytes(card, neighbours[k], tag));
  }
  comm.wait_all(requests, "window create");
  for (std::size_t k = 0; k < neighbours.size(); ++k) cards[k].resize(requests[2 * k].received_bytes());
  return cards;
}

// How each neighbour is reached, from the memories reached through their
// cards (in the neighbours' order).
template <class Communicator, class RemoteMemory>
std::vector<reach> agree_on_reach(Communicator& comm, const std::vector<int>& neighbours,
                                  const std::vector<RemoteMemory>& memories, transport::tag_t tag) {
  using transport_type = typename Communicator::transport_type;
  std::vector<std::uint8_t> mine(neighbours.size()), theirs(neighbours.size());
  std::vector<typename Communicator::request> requests;
  for (std::size_t k = 0; k < neighbours.size(); ++k) {
    mine[k] = memories[k].direct() != nullptr ? 1 : 0;
    requests.push_back(comm.irecv_bytes(std::as_writable_bytes(std::span(&theirs[k], 1)), neighbours[k], tag));
    requests.push_back(comm.isend_bytes(std::as_bytes(std::span(&mine[k], 1)), neighbours[k], tag));
  }
  comm.wait_all(requests, "window create");
  const reach remote =
      !transport_type::remote_access_needs_target_progress || variables::window_rma() ? reach::rma : reach::messages;
  std::vector<reach> ways;
  for (std::size_t k = 0; k < neighbours.size(); ++k)
    ways.push_back(mine[k] != 0 && theirs[k] != 0 ? reach::mapped : remote);
  return ways;
}

}  // namespace chorus::windows
