// Membership as the asynchronous schemes share it: where each member stands
// (a joiner being admitted, live, leaving, done, departed, lost) and, for a
// rank that serves workers (asynchronous EASGD's centre, a parameter
// server's shard), the roster of those workers with the one rule for a
// failure met while serving them:
//   a joiner that dies before its first message (still being admitted) is
//   forgotten without a trace, under any policy (admission.hpp, step 4);
//   any other worker's death is a loss under the scheme's on_peer_failure
//   (peer_loss.hpp): dropped and recorded under continue_, an error under raise.
// A dropped worker's messages so far stay taken; it is no longer waited for.
#pragma once

#include <chorus/averaging/admission.hpp>
#include <chorus/averaging/peer_loss.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace chorus::averaging {

enum class standing {
  admitting,  // a joiner welcomed and not yet heard from
  live,
  leaving,   // said it leaves; its last message follows (GoSGD's hand-over)
  finished,  // said done: it takes the scheme's result
  departed,  // left the job on purpose: no result for it
  lost,      // dead and dropped (or a joiner that died during its admission)
  absent,    // gone before this rank joined the job: never heard from
};

// Whether messages are still expected from a member that stands so.
constexpr bool still_sending(standing where) noexcept {
  return where == standing::admitting || where == standing::live || where == standing::leaving;
}

// The workers one serving side serves, by their ranks of its communicator,
// in the order they came (index w). Used by one thread at a time.
class worker_roster {
 public:
  worker_roster() = default;
  explicit worker_roster(std::vector<int> ranks)
      : ranks_(std::move(ranks)), standings_(ranks_.size(), standing::live), sending_(ranks_.size()) {}

  std::size_t size() const noexcept { return ranks_.size(); }
  int rank(std::size_t w) const { return ranks_[w]; }
  standing at(std::size_t w) const { return standings_[w]; }
  bool sending(std::size_t w) const { return still_sending(standings_[w]); }
  // The workers still sending: those a finish waits for.
  std::size_t sending_count() const noexcept { return sending_; }
  // Worker `rank`'s index, or size() if it is none of these.
  std::size_t index_of(int rank) const {
    return static_cast<std::size_t>(std::find(ranks_.begin(), ranks_.end(), rank) - ranks_.begin());
  }

  // A joiner, rank `rank` of the (grown) communicator; returns its index.
  std::size_t admit(int rank) {
    ranks_.push_back(rank);
    standings_.push_back(standing::admitting);
    ++sending_;
    return ranks_.size() - 1;
  }

  // Its first message arrived: a joiner is a member from here on.
  void heard_from(std::size_t w) {
    if (standings_[w] == standing::admitting) standings_[w] = standing::live;
  }

  // It said goodbye: done (it takes the result) or leaving (it does not).
  void said_goodbye(std::size_t w, bool leaving) {
    if (sending(w)) --sending_;
    standings_[w] = leaving ? standing::departed : standing::finished;
  }

  // Drops worker `rank`, dead; false if there is nothing to drop (not one
  // of these, or dropped already). A worker that died after its goodbye is
  // dropped too: it is sent nothing more.
  bool drop(int rank) {
    const std::size_t w = index_of(rank);
    if (w == size() || standings_[w] == standing::lost) return false;
    if (sending(w)) --sending_;
    standings_[w] = standing::lost;
    return true;
  }

  // Inside the catch block of `failure`, raised while serving: the rank (of
  // comm) this side goes on without, not yet dropped (the caller drops it
  // and lets go of its requests); rethrows when the policy says so. The
  // peer named need not be the one served: a wait fails while any dead
  // peer has operations in flight.
  template <class Communicator>
  int absorb(const Communicator& comm, const error& failure, peer_losses& losses, std::uint64_t step) const {
    if (const std::optional<int> gone = admission::gone_member(comm, failure)) {
      const std::size_t w = index_of(*gone);
      if (w < size() && standings_[w] == standing::admitting) return *gone;
    }
    return losses.absorb(comm, failure, step);
  }

 private:
  std::vector<int> ranks_;
  std::vector<standing> standings_;
  std::size_t sending_ = 0;
};

}  // namespace chorus::averaging
