// The device half of a window whose slots live in device memory (window.hpp:
// "Device slots"): the payloads of this rank's published tensor and of each
// source's slot, in one allocation of device memory registered with the
// transport, and each neighbour's such region, reached by its one-sided
// operations (UCX RMA: cuda_ipc between processes on one GPU). The
// counters and entry headers stay in the host region (slot.hpp), so the
// slot protocol is unchanged; a payload put is flushed before the counter
// that makes it visible (a flush, not a fence: the payload and the counter
// travel different transports).
//
//   [ published entry 1 | published entry 2 ][ source 0: entry 1 | entry 2 ] ...
//
// Each entry is rounded up to 256 bytes (the device's copy granule); entry
// k of a slot sits at entry_at(base, k), as in slot.hpp's double buffer.
#pragma once

#include <chorus/route/local_arithmetic.hpp>
#include <chorus/window/peer_region.hpp>
#include <chorus/window/slot.hpp>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <utility>
#include <vector>

namespace chorus::windows {

// Offsets in a device region of `sources` slots of `payload_bytes` a
// entry, after the published tensor of `tensor_bytes`.
struct device_layout {
  std::size_t tensor_bytes = 0;
  std::size_t payload_bytes = 0;

  static constexpr std::size_t granule = 256;
  std::size_t published_entry() const noexcept { return round_up(tensor_bytes, granule); }
  std::size_t slot_entry() const noexcept { return round_up(payload_bytes, granule); }
  // The first entry's offset of the slot at `position` (sources ascending).
  std::size_t slot_at(std::size_t position) const noexcept {
    return 2 * published_entry() + position * 2 * slot_entry();
  }
  std::size_t bytes(std::size_t sources) const noexcept { return slot_at(sources); }
  static std::size_t entry_at(std::size_t base, std::size_t entry_bytes, std::uint64_t number) noexcept {
    return base + (number % 2) * entry_bytes;
  }
  std::size_t published_at(std::uint64_t number) const noexcept { return entry_at(0, published_entry(), number); }
  std::size_t payload_at(std::size_t slot, std::uint64_t number) const noexcept {
    return entry_at(slot, slot_entry(), number);
  }
};

template <transport::OneSided Transport>
class device_region {
 public:
  using link_type = peer_region<Transport>;

  // Zeroed device memory of `bytes`, made through `where` (it outlives the
  // call) and registered with the transport at the address it moves.
  device_region(local_arithmetic& where, Transport& network, std::size_t bytes)
      : memory_(where.kept(bytes)),
        network_(&network),
        exposed_(
            network.expose(std::span(static_cast<std::byte*>(where.network_address(memory_.get())), bytes), memory_)) {}

  device_region(const device_region&) = delete;
  device_region& operator=(const device_region&) = delete;
  ~device_region() { links_.clear(); }

  // The region as device code addresses it.
  std::byte* data() const noexcept { return static_cast<std::byte*>(memory_.get()); }
  std::size_t size() const noexcept { return exposed_.size(); }
  std::vector<std::byte> card() const { return exposed_.card(); }

  // A neighbour's region, from its card: always by RMA (device memory is
  // never mapped into the host, not even a peer's on this host).
  void reach(int rank, int world_rank, std::span<const std::byte> card) {
    links_.emplace(rank,
                   std::make_unique<link_type>(*network_, world_rank, network_->reach(world_rank, card), reach::rma));
  }
  link_type& link(int rank) { return *links_.at(rank); }
  bool reaches(int rank) const { return links_.contains(rank); }

  void flush_all(transport::clock::time_point deadline) {
    for (auto& [rank, to] : links_) to->flush(deadline);
  }
  void abandon(int rank) {
    if (const auto found = links_.find(rank); found != links_.end()) found->second->abandon();
  }
  // After a failure a peer may still write here: the registration (and the
  // memory it keeps alive) goes with the transport's worker instead.
  void retire() noexcept {
    for (auto& [rank, to] : links_) to->abandon();
    links_.clear();
    try {
      network_->retire(std::move(exposed_));
    } catch (...) {  // out of memory for the list: leak it rather than free it under a writer
      new typename Transport::exposed_memory(std::move(exposed_));
    }
  }

 private:
  std::shared_ptr<void> memory_;
  Transport* network_;
  typename Transport::exposed_memory exposed_;
  std::map<int, std::unique_ptr<link_type>> links_;
};

}  // namespace chorus::windows
