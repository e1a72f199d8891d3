// Memory that peers read and write without this rank's help (UCP RMA):
// what one rank exposes, and what another holds to reach it.
//
//   exposed_memory mine = exposed_memory::allocate(context, bytes);  // ucp_mem_map
//   std::vector<std::byte> card = mine.card();        // base address + packed key
//   ...send the card to the peers...
//   remote_memory theirs(endpoint, card);             // ucp_ep_rkey_unpack
//   theirs.direct()                                   // a pointer, when mapped here
//
// The memory is allocated by UCX (UCP_MEM_MAP_ALLOCATE), so a peer on the
// same host maps it (ucp_rkey_ptr over the posix/sysv shared-memory domains)
// and reaches it with plain loads and stores; a peer on another host reaches
// it by ucp_put_nbx / ucp_get_nbx / ucp_atomic_op_nbx (on TCP UCX emulates
// them with active messages, so the target's worker must be progressed: the
// window layer keeps the communicator's progress thread running).
#pragma once

#include <chorus/core/error.hpp>

#include <ucp/api/ucp.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace chorus::ucx {

// A region this rank allocated and registered for its peers.
class exposed_memory {
 public:
  exposed_memory() = default;
  exposed_memory(const exposed_memory&) = delete;
  exposed_memory& operator=(const exposed_memory&) = delete;
  exposed_memory(exposed_memory&& other) noexcept { *this = std::move(other); }
  exposed_memory& operator=(exposed_memory&& other) noexcept {
    std::swap(context_, other.context_);
    std::swap(handle_, other.handle_);
    std::swap(base_, other.base_);
    std::swap(bytes_, other.bytes_);
    std::swap(key_, other.key_);
    std::swap(owner_, other.owner_);
    return *this;
  }
  ~exposed_memory() { release(); }

  // Zeroed memory of `bytes` (at least one byte is mapped).
  static exposed_memory allocate(ucp_context_h context, std::size_t bytes, int rank) {
    exposed_memory region;
    region.context_ = context;
    ucp_mem_map_params_t params{};
    params.field_mask =
        UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH | UCP_MEM_MAP_PARAM_FIELD_FLAGS;
    params.address = nullptr;
    params.length = bytes == 0 ? 1 : bytes;
    params.flags = UCP_MEM_MAP_ALLOCATE;
    check(ucp_mem_map(context, &params, &region.handle_), "ucp_mem_map", rank);
    ucp_mem_attr_t attributes{};
    attributes.field_mask = UCP_MEM_ATTR_FIELD_ADDRESS | UCP_MEM_ATTR_FIELD_LENGTH;
    check(ucp_mem_query(region.handle_, &attributes), "ucp_mem_query", rank);
    region.base_ = static_cast<std::byte*>(attributes.address);
    region.bytes_ = bytes;
    std::memset(region.base_, 0, params.length);
    region.pack_key(rank);
    return region;
  }

  // Memory the caller allocated (device memory, on the window's device
  // slots), registered as it is: UCX finds its kind itself. `owner` keeps
  // it alive until release(), so a retired region (a peer may still write)
  // is freed only with the worker.
  static exposed_memory register_memory(ucp_context_h context, std::span<std::byte> memory,
                                        std::shared_ptr<void> owner, int rank) {
    exposed_memory region;
    region.context_ = context;
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = memory.data();
    params.length = memory.size();
    check(ucp_mem_map(context, &params, &region.handle_), "ucp_mem_map", rank);
    region.base_ = memory.data();
    region.bytes_ = memory.size();
    region.owner_ = std::move(owner);
    region.pack_key(rank);
    return region;
  }

  std::byte* data() const noexcept { return base_; }
  std::size_t size() const noexcept { return bytes_; }

  // What a peer needs to reach the region: its base address, then the key.
  std::vector<std::byte> card() const {
    std::vector<std::byte> bytes(sizeof(std::uint64_t) + key_.size());
    const auto base = reinterpret_cast<std::uint64_t>(base_);
    std::memcpy(bytes.data(), &base, sizeof base);
    std::memcpy(bytes.data() + sizeof base, key_.data(), key_.size());
    return bytes;
  }

  // Unregisters and frees; the caller makes sure no peer still writes here.
  void release() noexcept {
    if (handle_ != nullptr) ucp_mem_unmap(context_, handle_);
    handle_ = nullptr;
    base_ = nullptr;
    owner_.reset();
  }

 private:
  void pack_key(int rank) {
    void* packed = nullptr;
    std::size_t packed_bytes = 0;
    check(ucp_rkey_pack(context_, handle_, &packed, &packed_bytes), "ucp_rkey_pack", rank);
    key_.assign(static_cast<const std::byte*>(packed), static_cast<const std::byte*>(packed) + packed_bytes);
    ucp_rkey_buffer_release(packed);
  }

  static void check(ucs_status_t status, const char* call, int rank) {
    if (status != UCS_OK)
      throw error(errc::transport, std::string(call) + ": " + ucs_status_string(status), {rank, -1, "window"});
  }

  ucp_context_h context_ = nullptr;
  ucp_mem_h handle_ = nullptr;
  std::byte* base_ = nullptr;
  std::size_t bytes_ = 0;
  std::vector<std::byte> key_;
  std::shared_ptr<void> owner_;  // register_memory's
};

// A peer's exposed region, reached through the endpoint to that peer.
class remote_memory {
 public:
  remote_memory() = default;
  remote_memory(const remote_memory&) = delete;
  remote_memory& operator=(const remote_memory&) = delete;
  remote_memory(remote_memory&& other) noexcept { *this = std::move(other); }
  remote_memory& operator=(remote_memory&& other) noexcept {
    std::swap(key_, other.key_);
    std::swap(base_, other.base_);
    std::swap(direct_, other.direct_);
    return *this;
  }
  ~remote_memory() { release(); }

  // From a card (exposed_memory::card()) the peer sent; a malformed card
  // is a transport error naming the peer.
  remote_memory(ucp_ep_h endpoint, std::span<const std::byte> card, int rank, int peer) {
    if (card.size() <= sizeof(std::uint64_t))
      throw error(errc::mismatch, "a window card of " + std::to_string(card.size()) + " bytes", {rank, peer, "window"});
    std::memcpy(&base_, card.data(), sizeof base_);
    const ucs_status_t status = ucp_ep_rkey_unpack(endpoint, card.data() + sizeof base_, &key_);
    if (status != UCS_OK)
      throw error(errc::transport, std::string("ucp_ep_rkey_unpack: ") + ucs_status_string(status),
                  {rank, peer, "window"});
    void* mapped = nullptr;
    if (ucp_rkey_ptr(key_, base_, &mapped) == UCS_OK) direct_ = static_cast<std::byte*>(mapped);
  }

  ucp_rkey_h key() const noexcept { return key_; }
  std::uint64_t address(std::size_t offset) const noexcept { return base_ + offset; }
  // The region mapped into this process (a peer on this host), or null.
  std::byte* direct() const noexcept { return direct_; }

  void release() noexcept {
    if (key_ != nullptr) ucp_rkey_destroy(key_);
    key_ = nullptr;
    direct_ = nullptr;
  }

 private:
  ucp_rkey_h key_ = nullptr;
  std::uint64_t base_ = 0;
  std::byte* direct_ = nullptr;
};

}  // namespace chorus::ucx
