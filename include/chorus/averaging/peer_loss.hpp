// What an asynchronous scheme does when a peer dies mid-training (its
// options' on_peer_failure):
//   raise      (the default) the death is a chorus::error (peer_failure or
//              timeout) at the next operation that needs the peer, as
//              everywhere in chorus;
//   continue_  the survivors drop the peer from their peer sets and go on;
//              the scheme says how it accounts for the peer's share (GoSGD
//              renormalises the survivors' weights; a server forgets a dead
//              worker; a dead server or centre is still an error: its
//              state has no copy).
// Synchronous schemes have no such option: a step that needs every rank
// cannot complete without one.
//
// peer_losses is the one place a scheme asks "is this failure one I go on
// from?": inside the catch block of a chorus::error, absorb() records the
// dead peer the error names as lost when the policy is continue_, and
// rethrows the failure otherwise. Records say who (transport rank) and
// when (the scheme's step count, and seconds since the scheme started).
#pragma once

#include <chorus/core/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string_view>
#include <vector>

namespace chorus::averaging {

enum class peer_failure_policy { raise, continue_ };

constexpr std::string_view to_string(peer_failure_policy policy) noexcept {
  return policy == peer_failure_policy::raise ? "raise" : "continue";
}

struct lost_peer {
  int rank = -1;           // transport (world) rank
  std::uint64_t step = 0;  // the noticing rank's step count when it noticed
  double seconds = 0;      // since the scheme started
};

// Thread-safe: a server records losses on the progress thread while its
// trainer reads them.
class peer_losses {
 public:
  explicit peer_losses(peer_failure_policy policy = peer_failure_policy::raise) : policy_(policy) {}
  peer_losses(const peer_losses&) = delete;
  peer_losses& operator=(const peer_losses&) = delete;

  bool tolerated() const noexcept { return policy_ == peer_failure_policy::continue_; }

  // Call inside the catch block of `failure`, raised by an operation of
  // the scheme: returns the rank (of comm) of the dead peer it names, now
  // recorded as lost, when the policy goes on without it; otherwise
  // rethrows. The peer named need not be the one operated on: a wait fails
  // while any dead peer still has operations in flight, so the caller drops
  // the peer returned and retries its own operation later.
  template <class Communicator>
  int absorb(const Communicator& comm, const error& failure, std::uint64_t step) {
    if (tolerated())
      for (int peer = 0; peer < comm.size(); ++peer)
        if (comm.world_rank(peer) == failure.peer() && peer != comm.rank() && comm.peer_gone(peer)) {
          record(failure.peer(), step);
          return peer;
        }
    throw;
  }

  std::vector<lost_peer> list() const {
    std::lock_guard lock(mutex_);
    return lost_;
  }
  std::vector<int> ranks() const {
    std::lock_guard lock(mutex_);
    std::vector<int> ranks;
    for (const lost_peer& peer : lost_) ranks.push_back(peer.rank);
    return ranks;
  }
  std::size_t count() const {
    std::lock_guard lock(mutex_);
    return lost_.size();
  }

  // Records a peer (transport rank) as lost, once; for schemes whose
  // building blocks drop dead peers themselves (a window's drop_dead_peers).
  void record(int world_rank, std::uint64_t step) {
    std::lock_guard lock(mutex_);
    if (std::any_of(lost_.begin(), lost_.end(), [&](const lost_peer& peer) { return peer.rank == world_rank; })) return;
    lost_.push_back(
        {world_rank, step, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count()});
  }

 private:
  peer_failure_policy policy_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  mutable std::mutex mutex_;
  std::vector<lost_peer> lost_;
};

}  // namespace chorus::averaging
