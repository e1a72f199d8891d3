// The UCX defaults chorus changes, set in the environment once per process
// before any context reads it (UCT options cannot be set through
// ucp_config_modify); a user's value always wins. The transport calls
// prepare_environment() before anything reads the environment: setenv while
// another thread reads it is a data race (ranks as threads start
// concurrently), and the once-only initialisation makes every other caller
// wait until it is done.
//
// Shared-memory transports can detect a dead peer (they check that its
// process is alive) but UCX hides that unless asked; without it the PEER
// error mode pushes intra-node traffic onto TCP (docs/configuration.md
// has the cost). The keepalive
// that runs the check defaults to 20 s, longer than users wait for an
// error; 1 s costs one tiny message per endpoint per second.
//
// When the user restricts UCX_TLS to tcp (and self), large messages go
// eager in 64 KiB fragments. A rendezvous handshake queues behind bulk data
// on a busy link, which slowed the encode-once compressed allreduce on a
// shaped network (docs/performance.md, "Rendezvous handshakes"), and TCP
// copies through the kernel either way. The eager fragments are copied (bcopy), never
// zero-copy: UCX 1.13's TCP transport completes a zero-copy send twice when
// the socket fails under it (a peer died) and aborts on its own assertion
// (the cross-host kill test saw it in 2 of 68 jobs); on loopback TCP the
// copy was as fast or faster, 1 KiB-32 MiB. (The shared-memory options are
// not set then: UCX warns about them.)
#pragma once

#include <algorithm>
#include <cstdlib>
#include <string_view>

namespace chorus::ucx {

// Whether a UCX_TLS list names only tcp (and self).
inline bool only_tcp(std::string_view list) {
  bool tcp = false;
  while (!list.empty()) {
    const std::size_t comma = std::min(list.find(','), list.size());
    const std::string_view name = list.substr(0, comma);
    if (name == "tcp")
      tcp = true;
    else if (name != "self")
      return false;
    list.remove_prefix(std::min(comma + 1, list.size()));
  }
  return tcp;
}

inline void prepare_environment() {
  static const bool done = [] {
    ::setenv("UCX_KEEPALIVE_INTERVAL", "1s", 0);
    const char* tls = std::getenv("UCX_TLS");
    if (tls != nullptr && only_tcp(tls)) {
      ::setenv("UCX_RNDV_THRESH", "inf", 0);
      ::setenv("UCX_ZCOPY_THRESH", "inf", 0);
      ::setenv("UCX_TCP_TX_SEG_SIZE", "64K", 0);
    } else {
      ::setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
      ::setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
    }
    return true;
  }();
  (void)done;
}

}  // namespace chorus::ucx
