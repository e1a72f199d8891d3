// The memory kind UCX registers a buffer as: the second of the two checks
// the direct path makes before it hands device memory to UCX (NIXL's).
//
// The context's memory types (ucp_context_query, context.hpp) say whether
// UCX moves CUDA memory at all; they do not say that it will take this
// buffer for CUDA memory. So a device buffer is mapped (ucp_mem_map, no
// allocation), its type read back (ucp_mem_query) and unmapped: an address
// UCX's memory-type detection does not know (a CUDA module that failed to
// load, memory from another allocator) comes back as host memory, and the
// call is then staged rather than handed to a host transport that would
// dereference it.
//
// Cost: one registration and one deregistration per buffer the first time
// it is asked about (UCX's own registration cache makes a later map of the
// same memory cheap); answers are remembered for the last `remembered`
// buffers, so a training loop's gradient buckets are asked once.
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/core/memory_kind.hpp>

#include <ucp/api/ucp.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <vector>

namespace chorus::ucx {

// What UCX's memory type means to chorus: CUDA memory (device or managed)
// is moved as device memory; anything else UCX moves as host memory.
constexpr memory_kind kind_of_ucs_type(ucs_memory_type_t type) noexcept {
  return type == UCS_MEMORY_TYPE_CUDA || type == UCS_MEMORY_TYPE_CUDA_MANAGED ? memory_kind::cuda_device
                                                                              : memory_kind::host;
}

// Asks UCX for the memory type of buffers, remembering the answers. Not
// thread-safe: the transport calls it under its lock.
class registered_kinds {
 public:
  static constexpr std::size_t remembered = 64;

  memory_kind of(ucp_context_h context, const void* data, std::size_t bytes, int rank) {
    if (data == nullptr || bytes == 0) return memory_kind::host;
    const auto known = std::find_if(answers_.begin(), answers_.end(),
                                    [&](const answer& a) { return a.data == data && a.bytes == bytes; });
    if (known != answers_.end()) return known->kind;
    const memory_kind kind = ask(context, data, bytes, rank);
    if (answers_.size() == remembered) answers_.erase(answers_.begin());
    answers_.push_back({data, bytes, kind});
    return kind;
  }

 private:
  struct answer {
    const void* data;
    std::size_t bytes;
    memory_kind kind;
  };

  static memory_kind ask(ucp_context_h context, const void* data, std::size_t bytes, int rank) {
    ucp_mem_map_params_t params{};
    params.field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH;
    params.address = const_cast<void*>(data);
    params.length = bytes;
    ucp_mem_h handle = nullptr;
    const ucs_status_t mapped = ucp_mem_map(context, &params, &handle);
    if (mapped != UCS_OK)
      throw error(errc::transport,
                  std::string("ucp_mem_map of a ") + std::to_string(bytes) + " B buffer: " + ucs_status_string(mapped),
                  {rank, -1, "direct path"});
    ucp_mem_attr_t attributes{};
    attributes.field_mask = UCP_MEM_ATTR_FIELD_MEM_TYPE;
    const ucs_status_t queried = ucp_mem_query(handle, &attributes);
    ucp_mem_unmap(context, handle);
    if (queried != UCS_OK)
      throw error(errc::transport, std::string("ucp_mem_query: ") + ucs_status_string(queried),
                  {rank, -1, "direct path"});
    return kind_of_ucs_type(attributes.mem_type);
  }

  std::vector<answer> answers_;
};

}  // namespace chorus::ucx
