// What a UCX status means to chorus: which statuses say the peer is gone,
// and the chorus::error category of a failed operation.
#pragma once

#include <chorus/core/error.hpp>

#include <ucp/api/ucp.h>

#include <cstdint>
#include <cstdio>
#include <string>

namespace chorus::ucx {

inline bool is_peer_failure(ucs_status_t status) noexcept {
  return status == UCS_ERR_CONNECTION_RESET || status == UCS_ERR_ENDPOINT_TIMEOUT || status == UCS_ERR_UNREACHABLE ||
         status == UCS_ERR_REJECTED || status == UCS_ERR_NOT_CONNECTED || status == UCS_ERR_CANCELED;
}

// A message larger than the receive buffer is the callers' disagreement;
// any failure with a peer whose process is gone is that peer's failure
// (UCX may say "Shared memory error" for a dead shared-memory peer).
inline errc category_of(ucs_status_t status, bool peer_gone) noexcept {
  if (status == UCS_ERR_MESSAGE_TRUNCATED) return errc::mismatch;
  return is_peer_failure(status) || peer_gone ? errc::peer_failure : errc::transport;
}

inline void check_peer(int rank, int ranks, int peer, const char* operation) {
  if (peer < 0 || peer >= ranks)
    throw error(errc::invalid_argument,
                "peer " + std::to_string(peer) + " is not in [0, " + std::to_string(ranks) + ")",
                {rank, peer, operation});
}

inline void check_tag(int rank, std::uint64_t tag, std::uint64_t limit, int peer, const char* operation) {
  if (tag > limit)
    throw error(errc::invalid_argument, "tag does not fit in the user tag bits", {rank, peer, operation});
}

inline std::string to_hex(std::uint64_t value) {
  char text[20];
  std::snprintf(text, sizeof text, "%llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace chorus::ucx
