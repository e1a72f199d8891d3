// neighbour_links: how a window's rank reaches each neighbour's memory,
// and whether that neighbour still lives. One link (peer_region.hpp) per
// neighbour, reached the way the pair agreed (exposure.hpp); the relay that
// applies the operations of the neighbours that reach this rank by messages
// (relay.hpp), served by the communicator's progress thread while the
// trainer computes; the watch on neighbours reached through mapped memory,
// whose death no network operation would notice (their processes are asked
// at most every 50 ms, for all of them together); and which neighbours are
// lost, under the window's policy: a dead one is an error that ends the
// job, or, with drop_dead_peers, dropped while the operation goes on with
// the others.
#pragma once

#include <chorus/comm/progress_thread.hpp>
#include <chorus/comm/tag.hpp>
#include <chorus/core/error.hpp>
#include <chorus/transport/transport.hpp>
#include <chorus/window/device_region.hpp>
#include <chorus/window/peer_region.hpp>
#include <chorus/window/relay.hpp>
#include <chorus/window/slot.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace chorus::windows {

template <class Communicator>
class neighbour_links {
  using transport_type = typename Communicator::transport_type;

 public:
  using region = peer_region<transport_type>;
  using remote_memory = typename transport_type::remote_memory;

  neighbour_links(Communicator& comm, bool drop_dead) : comm_(comm), drop_dead_(drop_dead) {}
  neighbour_links(const neighbour_links&) = delete;
  neighbour_links& operator=(const neighbour_links&) = delete;

  // One link per neighbour (window ranks, ascending), from the memory its
  // card reached and the way agreed; `own` is this rank's exposed memory,
  // which the relay writes for the neighbours that reach it by messages.
  void connect(const std::vector<int>& neighbours, std::vector<remote_memory> memories, const std::vector<reach>& ways,
               std::span<std::byte> own) {
    transport_type& network = comm_.transport();
    const relay_tags tags{comm_.wire_tag(tag::point_to_point, 1), comm_.wire_tag(tag::point_to_point, 2),
                          comm_.wire_tag(tag::point_to_point, 3)};
    std::vector<int> relayed;  // world ranks: the neighbours this rank's relay serves
    for (std::size_t k = 0; k < neighbours.size(); ++k) {
      const int peer = comm_.world_rank(neighbours[k]);
      links_.emplace(neighbours[k], std::make_unique<region>(network, peer, std::move(memories[k]), ways[k], tags));
      if (ways[k] == reach::messages) relayed.push_back(peer);
    }
    for (std::size_t k = 0; k < neighbours.size(); ++k)
      if (ways[k] == reach::rma) try_remote_atomics(neighbours[k]);
    // Over the network a neighbour's ops are messages this rank's progress
    // thread applies (or UCX's emulated RMA its worker answers): keep the
    // network moving while the trainer computes.
    if constexpr (transport_type::remote_access_needs_target_progress) {
      if (!relayed.empty()) {
        relay_.emplace(network, own, tags, relayed, comm_.world_rank(comm_.rank()));
        progress_ = comm_.progress_thread().add([this] { return relay_->serve(); });
        relay_thread_ = &comm_.progress_thread();
      } else if (std::find(ways.begin(), ways.end(), reach::rma) != ways.end()) {
        progress_ = comm_.progress_thread().add([] { return false; });
      }
    }
  }

  region& operator[](int rank) { return *links_.at(rank); }

  // Whether neighbour `rank` is dead. A relayed neighbour's death is final
  // once the relay has applied all it sent before (its last entries may
  // still be on their way in).
  bool gone(int rank) {
    if (comm_.peer_gone(rank)) return !relay_ || relay_->settled(comm_.world_rank(rank));
    const auto now = transport::clock::now();
    if (now < next_watch_) return false;
    next_watch_ = now + watch_interval;
    return comm_.transport().peer_gone_now(comm_.world_rank(rank));
  }

  // A neighbour's malformed request, found by the relay, raised here.
  void rethrow_if_failed() { progress_.rethrow_if_failed(); }

  // A read that waits on the thread the relay runs on (a server reading
  // its slots from a progress-thread poller) applies the writer's remaining
  // relayed operations itself: nothing else would.
  void serve_relay_if_here() {
    if (relay_thread_ != nullptr && relay_thread_->is_this_thread()) relay_->serve();
  }

  // The device region's links end with the host ones when a neighbour is
  // dropped (device_region.hpp); it outlives these links' use.
  void include_device_links(device_region<transport_type>& device) { device_ = &device; }

  bool lost(int rank) const { return std::find(lost_.begin(), lost_.end(), rank) != lost_.end(); }
  bool drops_dead() const noexcept { return drop_dead_; }

  // Forgets a neighbour: its links' operations end at once; operations
  // skip it from here on.
  void drop(int rank) {
    if (!lost(rank)) lost_.push_back(rank);
    if (const auto found = links_.find(rank); found != links_.end()) found->second->abandon();
    if (device_ != nullptr) device_->abandon(rank);
  }

  // A dead neighbour: an error that ends the job (teardown then abandons,
  // bounded), unless the window drops dead neighbours and goes on.
  [[noreturn]] void fail_gone(int rank, const std::string& operation) const {
    if (!drop_dead_) comm_.transport().abandon();
    throw error(errc::peer_failure, "the peer is gone",
                {comm_.world_rank(comm_.rank()), comm_.world_rank(rank), operation});
  }

  // f(); with drop_dead_peers a neighbour whose death f reports is dropped
  // instead of raised.
  template <class F>
  void guarded(F&& f) {
    try {
      f();
    } catch (const error& failure) {
      if (!drop_dead_ || failure.category() != errc::peer_failure) throw;
      drop(dead_named(failure));
    }
  }
  // f(state) for each state of a neighbour not lost, guarded.
  template <class States, class F>
  void each_live(States& states, F&& f) {
    for (auto& state : states)
      if (!lost(state.rank)) guarded([&] { f(state); });
  }

  // free(): every write has landed and the ranks met; the relay stops.
  void close() {
    progress_.release();
    relay_thread_ = nullptr;
    relay_.reset();
    links_.clear();
  }

  // After a failure, or a window dropped without free(): nothing waits.
  void abandon_all() noexcept {
    progress_.release();
    for (auto& [rank, reached] : links_) reached->abandon();
    links_.clear();
  }

 private:
  static constexpr auto watch_interval = std::chrono::milliseconds(50);

  // In a catch block: the dead neighbour `failure` names, or rethrows.
  int dead_named(const error& failure) const {
    for (int rank = 0; rank < comm_.size(); ++rank)
      if (rank != comm_.rank() && comm_.world_rank(rank) == failure.peer() && comm_.peer_gone(rank)) return rank;
    throw;
  }

  // RMA to a neighbour (CHORUS_WINDOW_NETWORK=rma) is tried once at
  // creation: a UCX without remote atomics over the transport it chose (UCX
  // 1.22 over TCP: its endpoint then times out, which reads as the peer's
  // death) is an `unavailable` error here, not a peer failure at the first
  // write. A peer this host sees dead is its failure.
  void try_remote_atomics(int rank) {
    try {
      (void)(*this)[rank].load(completed_at, comm_.deadline());
    } catch (const error& failed) {
      if (comm_.transport().peer_gone_now(comm_.world_rank(rank))) throw;
      throw error(errc::unavailable,
                  std::string("UCX RMA to this neighbour failed (") + failed.what() +
                      "): this UCX has no remote atomics over the transport it chose (UCX 1.22 over TCP has none); "
                      "without CHORUS_WINDOW_NETWORK=rma the window relays its operations as messages",
                  {comm_.world_rank(comm_.rank()), comm_.world_rank(rank), "window create"});
    }
  }

  Communicator& comm_;  // the window's own
  bool drop_dead_;
  std::vector<int> lost_;                              // dropped, in order
  device_region<transport_type>* device_ = nullptr;    // device slots' links
  std::map<int, std::unique_ptr<region>> links_;       // by window rank
  std::optional<relay_server<transport_type>> relay_;  // serves the neighbours that reach this rank by messages
  progress_thread::registration progress_;             // released before relay_ goes
  const progress_thread* relay_thread_ = nullptr;      // where relay_ is served
  transport::clock::time_point next_watch_{};
};

}  // namespace chorus::windows
