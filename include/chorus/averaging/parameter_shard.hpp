// The server role of a parameter server (parameter_server.hpp): one shard
// of the model, its optimiser state and version, and the rules by which it
// serves its workers' messages in each consistency mode.
//
// Every worker sends its server one ordered stream on one tag (UCP tag
// matching keeps a sender's order), numbered from 1 (wire.hpp):
//   push  a gradient for the shard; value: the shard version it was computed on
//   pull  a request for the shard; value: the pushes the worker has sent
//   done  no more messages; value: the pushes it sent in all
//   leaving  the same from a worker that leaves the job (leave()): it
//         takes no part in finish() (no shard is sent to it)
// and gets a reply (the shard; value: its version) for every pull. A
// message that cannot be served yet stays at the head of its stream (the
// receive is not posted again), so the order of a worker's messages is the
// order of their effects:
//   BSP       a push joins the current round; the next round's push waits
//             until every live worker's push of this round is in, then the
//             round's mean (summed in rank order) takes one optimiser step.
//             A pull is served once the round of its last push is applied.
//   SSP(s)    a push is applied at once, scaled by 1/W; a pull from a worker
//             at clock c (pushes applied) is served once the slowest live
//             worker's clock is at least c - s.
//   Downpour  pushes are applied at once (scaled by 1/W), pulls served at once.
// So a reply always holds every push of the worker that asked (its pushes
// precede its pull in the stream; the pull's value checks it), and in SSP
// every worker's pushes up to c - s.
//
// Staleness of an applied gradient: the shard's version when it is applied
// minus the version it was computed on. Workers that said done leave the
// rounds and the slowest-clock computation; so do workers that died, when
// the policy goes on without them (peer_loss.hpp): their pushes so far stay
// applied.
//
// A worker that joins the running job (admission.hpp) gets a link of its
// own once its server admits it, and the shard as it is for a welcome. Its
// clock starts at the slowest live worker's (SSP holds no one back for it),
// and its pushes are scaled, as every push, by 1/W with W the workers the
// shard started with: the servers' learning rate does not change when
// workers come and go.
#pragma once

#include <chorus/averaging/admission.hpp>
#include <chorus/averaging/local_optimizer.hpp>
#include <chorus/averaging/peer_loss.hpp>
#include <chorus/averaging/roster.hpp>
#include <chorus/averaging/wire.hpp>
#include <chorus/core/error.hpp>
#include <chorus/transport/transport.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <limits>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::averaging {

enum class consistency { bsp, ssp, downpour };

constexpr std::string_view to_string(consistency mode) noexcept {
  switch (mode) {
    case consistency::bsp: return "bsp";
    case consistency::ssp: return "ssp";
    case consistency::downpour: return "downpour";
  }
  return "unknown";
}

// What a shard's server saw (summed over the shards a rank serves).
struct shard_stats {
  std::uint64_t gradients_applied = 0;  // pushes taken into the model
  std::uint64_t staleness_total = 0;    // of those, sum and largest staleness
  std::uint64_t staleness_max = 0;
  std::uint64_t clock_gap_max = 0;  // served pulls: how far the asker was ahead of the slowest live worker
  std::uint64_t pulls_served = 0;

  double mean_staleness() const noexcept {
    return gradients_applied == 0 ? 0.0 : static_cast<double>(staleness_total) / static_cast<double>(gradients_applied);
  }
  shard_stats& operator+=(const shard_stats& other) noexcept {
    gradients_applied += other.gradients_applied;
    staleness_total += other.staleness_total;
    staleness_max = std::max(staleness_max, other.staleness_max);
    clock_gap_max = std::max(clock_gap_max, other.clock_gap_max);
    pulls_served += other.pulls_served;
    return *this;
  }
};

struct shard_rules {
  consistency mode = consistency::bsp;
  std::uint64_t staleness = 0;  // SSP's s
  sgd_options optimiser{};
  // Downpour pushing by accumulate: pushes reach the shard apart from the
  // messages (take_summed), so a pull's push count is not checked.
  bool pushes_apart = false;
};

// One shard on its server. Communicator: the scheme's; all calls on one
// thread at a time (the progress thread, then the owner in finish()).
template <class Communicator>
class parameter_shard {
 public:
  using request = typename Communicator::request;
  static constexpr int request_tag = 1;
  static constexpr int reply_tag = 2;

  parameter_shard(Communicator& comm, std::span<const float> start, std::vector<int> workers, shard_rules rules,
                  peer_losses& losses)
      : comm_(comm),
        losses_(losses),
        rules_(rules),
        x_(start.begin(), start.end()),
        step_(x_.size()),
        workers_(std::move(workers)),
        links_(workers_.size()),
        initial_workers_(workers_.size()) {
    if (rules_.optimiser.momentum != 0.0) velocity_.assign(x_.size(), 0.0f);
    for (std::size_t w = 0; w < links_.size(); ++w) {
      links_[w].incoming = wire::message(bytes());
      links_[w].reply = wire::message(bytes());
      post(w);
    }
  }

  std::size_t bytes() const noexcept { return x_.size() * sizeof(float); }
  std::span<const float> values() const noexcept { return x_; }
  std::uint64_t version() const noexcept { return version_; }
  bool all_done() const noexcept { return workers_.sending_count() == 0; }
  shard_stats stats() const {
    std::lock_guard lock(stats_mutex_);
    return stats_;
  }

  // Serves every message that can be served now; true if one was.
  bool serve() {
    bool worked = false;
    for (bool again = true; again;) {  // a completed round may unblock pulls of workers already passed
      again = false;
      for (std::size_t w = 0; w < links_.size(); ++w) {
        try {
          while (serve_one(w)) again = worked = true;
        } catch (const error& failure) {
          drop(workers_.absorb(comm_, failure, losses_, stats().gradients_applied));
          again = true;  // a lost worker leaves the rounds and the slowest clock
        }
      }
    }
    return worked;
  }

  // Downpour pushing by accumulate: `pushes` of worker `rank`'s gradients,
  // summed in its window slot, computed on shard versions that sum to
  // `versions`: one optimiser step with their sum (a step per push would
  // differ only with momentum), each push counted for the goodbye.
  void take_summed(int rank, std::span<const float> gradients, std::uint64_t pushes, double versions) {
    const std::size_t w = workers_.index_of(rank);
    if (w == links_.size() || !workers_.sending(w) || pushes == 0) return;
    record_staleness(static_cast<std::uint64_t>(std::llround(versions / static_cast<double>(pushes))), pushes);
    step_with(gradients);
    links_[w].clock += pushes;
  }

  // A joiner, rank `rank` of the communicator (grown to hold it): a link,
  // and the shard as it is now (value: its version) as its welcome. Not
  // in BSP, whose rounds need every worker from the start.
  void admit(int rank) {
    const std::uint64_t clock = workers_.sending_count() > 0 ? slowest_clock() : 0;
    const std::size_t w = workers_.admit(rank);
    worker_link& link = links_.emplace_back();
    link.incoming = wire::message(bytes());
    link.reply = wire::message(bytes());
    link.clock = link.joined_at = clock;
    std::copy(x_.begin(), x_.end(), link.reply.template payload_as<float>().begin());
    const auto welcome = link.reply.write(wire::kind::reply, 0, static_cast<double>(version_), bytes());
    link.reply_send =  // standing: a joiner that dies before it takes it fails nothing else
        comm_.isend(welcome, rank, admission::welcome_tag, transport::receive_kind::standing);
    post(w);
  }

  // Whether `rank` is a worker this shard went on without, or one that left.
  bool gone(int rank) const {
    const std::size_t w = workers_.index_of(rank);
    return w < workers_.size() && (workers_.at(w) == standing::lost || workers_.at(w) == standing::departed);
  }

 private:
  struct worker_link {
    wire::message incoming;
    request receive;
    bool holding = false;  // `head` arrived and waits to be served
    wire::header head;
    std::uint64_t received = 0;         // messages read, for their sequence
    std::uint64_t clock = 0;            // pushes taken (BSP: into a round)
    std::vector<float> round_gradient;  // BSP: its push of the current round
    wire::message reply;
    request reply_send;
    std::uint64_t replies = 0;
    std::uint64_t joined_at = 0;  // a joiner's clock when admitted (its pushes count from there)
  };

  // A dead worker (roster.hpp's rule).
  void drop(int rank) {
    if (!workers_.drop(rank)) return;
    worker_link& link = links_[workers_.index_of(rank)];
    link.receive = request{};
    link.reply_send = request{};
    link.holding = false;
    if (rules_.mode == consistency::bsp) finish_round_if_complete();
  }

  void post(std::size_t w) {
    links_[w].receive =
        comm_.irecv(links_[w].incoming.buffer(), workers_.rank(w), request_tag, transport::receive_kind::standing);
  }

  wire::reader reader_for(std::size_t w) const {
    return {comm_.world_rank(comm_.rank()), comm_.world_rank(workers_.rank(w)), "parameter server"};
  }

  // Reads the next message of worker w if none is held, and serves it if
  // its mode allows; true if one was served.
  bool serve_one(std::size_t w) {
    worker_link& link = links_[w];
    if (!workers_.sending(w)) return false;
    if (!link.holding) {
      if (!comm_.test(link.receive)) return false;
      const std::array<wire::message::expected_kind, 4> kinds{
          {{wire::kind::push, bytes()}, {wire::kind::pull, 0}, {wire::kind::done, 0}, {wire::kind::leaving, 0}}};
      link.head = link.incoming.read(link.receive.received_bytes(), kinds, reader_for(w));
      wire::expect_sequence(link.head, ++link.received, reader_for(w));
      link.holding = true;
      workers_.heard_from(w);
    }
    if (!try_serve(w)) return false;
    link.holding = false;
    if (workers_.sending(w)) post(w);
    return true;
  }

  bool try_serve(std::size_t w) {
    worker_link& link = links_[w];
    const std::uint64_t claimed = wire::count_of(link.head, reader_for(w));
    switch (link.head.what) {
      case wire::kind::push: return take_push(w, claimed);
      case wire::kind::pull: return answer_pull(w, claimed);
      default:  // done or leaving: every push it sent was taken once
        if (claimed != link.clock - link.joined_at)
          reader_for(w).fail("parameter server: " + std::string(wire::to_string(link.head.what)) + " after " +
                             std::to_string(claimed) + " pushes, " + std::to_string(link.clock - link.joined_at) +
                             " arrived");
        workers_.said_goodbye(w, link.head.what == wire::kind::leaving);
        if (rules_.mode == consistency::bsp) finish_round_if_complete();  // it may have been the last one missing
        return true;
    }
  }

  std::span<const float> payload(std::size_t w) const {
    return std::span(reinterpret_cast<const float*>(links_[w].incoming.payload().data()), x_.size());
  }

  bool take_push(std::size_t w, std::uint64_t computed_on) {
    worker_link& link = links_[w];
    if (rules_.mode == consistency::bsp) {
      if (link.clock != version_) return false;  // the next round's: after this one
      link.round_gradient.assign(payload(w).begin(), payload(w).end());
      ++link.clock;
      record_staleness(computed_on);
      finish_round_if_complete();
      return true;
    }
    record_staleness(computed_on);
    step_with(payload(w));
    ++link.clock;
    return true;
  }

  // SSP and Downpour: one optimiser step with a worker's share of `g`.
  void step_with(std::span<const float> g) {
    const float share = 1.0f / static_cast<float>(initial_workers_);
    for (std::size_t k = 0; k < step_.size(); ++k) step_[k] = g[k] * share;
    sgd_step(x_, step_, velocity_, rules_.optimiser);
    ++version_;
  }

  // BSP: once every live worker's push of this round is in, the mean of the
  // round, summed in rank order, takes one step.
  void finish_round_if_complete() {
    std::size_t contributors = 0;
    for (std::size_t w = 0; w < links_.size(); ++w) {
      if (!workers_.sending(w)) continue;
      if (links_[w].clock != version_ + 1) return;
      ++contributors;
    }
    if (contributors == 0) return;
    std::fill(step_.begin(), step_.end(), 0.0f);
    for (std::size_t w = 0; w < links_.size(); ++w)
      if (workers_.sending(w))
        for (std::size_t k = 0; k < step_.size(); ++k) step_[k] += links_[w].round_gradient[k];
    const auto divisor = static_cast<float>(contributors);
    for (float& value : step_) value /= divisor;
    sgd_step(x_, step_, velocity_, rules_.optimiser);
    ++version_;
  }

  bool answer_pull(std::size_t w, std::uint64_t pushes) {
    worker_link& link = links_[w];
    if (pushes != link.clock - link.joined_at && !rules_.pushes_apart)
      reader_for(w).fail("parameter server: a pull after " + std::to_string(pushes) + " pushes found " +
                         std::to_string(link.clock - link.joined_at) + " of them (a push lost or out of order)");
    const std::uint64_t slowest = slowest_clock();
    switch (rules_.mode) {
      case consistency::bsp:
        if (version_ < link.clock) return false;
        break;
      case consistency::ssp:
        if (slowest + rules_.staleness < link.clock) return false;
        break;
      case consistency::downpour: break;
    }
    comm_.wait(link.reply_send, "parameter server reply");  // the previous reply, long gone
    std::copy(x_.begin(), x_.end(), link.reply.template payload_as<float>().begin());
    const auto sent = link.reply.write(wire::kind::reply, ++link.replies, static_cast<double>(version_), bytes());
    link.reply_send = comm_.isend(sent, workers_.rank(w), reply_tag);
    std::lock_guard lock(stats_mutex_);
    ++stats_.pulls_served;
    stats_.clock_gap_max = std::max(stats_.clock_gap_max, link.clock > slowest ? link.clock - slowest : 0);
    return true;
  }

  std::uint64_t slowest_clock() const noexcept {
    std::uint64_t slowest = std::numeric_limits<std::uint64_t>::max();
    for (std::size_t w = 0; w < links_.size(); ++w)
      if (workers_.sending(w)) slowest = std::min(slowest, links_[w].clock);
    return slowest;
  }

  void record_staleness(std::uint64_t computed_on, std::uint64_t pushes = 1) {
    const std::uint64_t staleness = version_ > computed_on ? version_ - computed_on : 0;
    std::lock_guard lock(stats_mutex_);
    stats_.gradients_applied += pushes;
    stats_.staleness_total += pushes * staleness;
    stats_.staleness_max = std::max(stats_.staleness_max, staleness);
  }

  Communicator& comm_;
  peer_losses& losses_;
  shard_rules rules_;
  std::vector<float> x_, velocity_, step_;
  std::uint64_t version_ = 0;      // optimiser steps taken (BSP: rounds)
  worker_roster workers_;          // their ranks and standing, by link
  std::deque<worker_link> links_;  // grows by joiners without moving a link
  std::size_t initial_workers_;    // W, of every push's 1/W
  mutable std::mutex stats_mutex_;
  shard_stats stats_;
};

}  // namespace chorus::averaging
