// Rounds of collectives that go on without a member that dies (a scheme's
// on_peer_failure = continue_ where each round is a collective over the
// whole group: DiLoCo). Three pieces:
//
// watch(): a round's zero-byte receives from every other member, posted
// before its collectives and dropped after. A member's death then fails
// every member's wait in the round within the transport's watch interval,
// not only the waits on the dead one (the transport dooms every wait while
// a dead peer has operations in flight; a flag wait in shared memory too):
// without them, a member waiting on a live member that itself stopped on
// the dead one would wait out the timeout.
//
// agree(): after a failure, the members that are left agree, through the
// job's store, on who they are and how far each got. Each checks in with
// the number of rounds it completed; the first to arrive (an atomic add)
// leads: it waits for every member of its group to check in or be gone
// (its process exited, or the communicator's timeout passed), takes a
// fresh communicator id and publishes the record "id member:completed ...".
// Every member builds the same group from it (regrouped: new id, sequence
// numbers afresh, so nothing of the failed collectives can match). A
// member's check-in written before it died is read after its death was
// seen, so every member decides alike; one absent from the record (it came
// after the timeout) is out of the job. The store is polled, not waited
// on: it fails every wait once a rank has died. Rounds complete in order on every
// member and a round completes nowhere unless every member entered it, so
// the completed counts differ by at most one: the scheme hands the last
// round's result from a member that has it to those that do not.
//
// farewell(): a member that stops (finish(), leave()) must not exit while
// another still has a watch receive from it posted (its exit would fail
// that member's round): each member, once its watch receives are dropped,
// sends the stopping ones a zero-byte farewell (its own tag: a watch
// receive must not take it), and a stopping member waits for one from
// every member before it returns.
//
// Cost: n - 1 receives posted and cancelled per round (no message), and
// after a death one store round trip per member and one record.
#pragma once

#include <chorus/averaging/peer_loss.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace chorus::averaging {

inline constexpr int round_watch_tag = 4010;     // receives that never match: a death fails them
inline constexpr int round_farewell_tag = 4011;  // a stopping member's farewells

// What agree() decided: the group from now on, and each of its members'
// completed rounds (in the group's order).
template <class Communicator>
struct round_verdict {
  Communicator group;
  std::vector<std::uint64_t> completed;
  std::vector<int> lost;  // transport ranks of the old group not in the new one
  bool excluded = false;  // this process is not among them: it is out of the job

  std::uint64_t most() const { return *std::max_element(completed.begin(), completed.end()); }
  std::uint64_t least() const { return *std::min_element(completed.begin(), completed.end()); }
  // The first member (rank of `group`) that completed the most rounds.
  int donor() const {
    return static_cast<int>(std::max_element(completed.begin(), completed.end()) - completed.begin());
  }
};

template <class Communicator>
class round_membership {
 public:
  using request = typename Communicator::request;

  // Collective over `group`: rank 0 numbers this instance in the job's store
  // (keys of different instances never meet); `announce` tells the others
  // (the scheme's own broadcast of one word).
  template <class Broadcast>
  round_membership(Communicator& group, Broadcast&& announce) {
    std::uint64_t instance = 0;
    if (group.rank() == 0 && group.store() != nullptr)
      instance = static_cast<std::uint64_t>(group.store()->add("chorus/rounds/instances", 1));
    announce(instance);
    instance_ = instance;
    prefix_ = "chorus/rounds/" + std::to_string(instance) + "/";
  }

  // A member that joined later: the instance and generation from its welcome.
  round_membership(std::uint64_t instance, std::uint64_t generation)
      : prefix_("chorus/rounds/" + std::to_string(instance) + "/"), instance_(instance), generation_(generation) {}

  std::uint64_t instance() const noexcept { return instance_; }
  std::uint64_t generation() const noexcept { return generation_; }

  // Before a round: a receive from every other member, dropped (cancelled)
  // when the returned list is cleared or destroyed.
  std::vector<request> watch(Communicator& group) const {
    std::vector<request> receives;
    receives.reserve(static_cast<std::size_t>(group.size()));
    for (int peer = 0; peer < group.size(); ++peer)
      if (peer != group.rank()) receives.push_back(group.irecv(std::span<std::byte>{}, peer, round_watch_tag));
    return receives;
  }

  // A member that dropped its watch receives tells a stopping one.
  void farewell(Communicator& group, int stopping) const {
    request sent = group.isend(std::span<const std::byte>{}, stopping, round_farewell_tag);
    group.wait(sent, "a farewell to a member that stops");
  }

  // A member that let a stopping one go while stopping itself takes the
  // farewell that one sends it.
  void await_farewell(Communicator& group, int stopping) const {
    request received = group.irecv(std::span<std::byte>{}, stopping, round_farewell_tag);
    group.wait(received, "the farewell of a member that leaves");
  }

  // A stopping member waits for every other member's farewell.
  void await_farewells(Communicator& group) const {
    std::vector<request> receives;
    for (int peer = 0; peer < group.size(); ++peer)
      if (peer != group.rank()) receives.push_back(group.irecv(std::span<std::byte>{}, peer, round_farewell_tag));
    group.wait_all(receives, "the farewells of the members that go on");
  }

  // After a failure, on every member that is left: see the file's comment.
  round_verdict<Communicator> agree(Communicator& group, std::uint64_t completed) {
    store_t& store = *group.store();
    const std::string round = prefix_ + std::to_string(generation_) + "/";
    const int me = group.transport().rank();
    store.set(round + "in/" + std::to_string(me), std::to_string(completed));
    if (store.add(round + "leader", 1) == 1) lead(group, round);
    const std::string record = read(store, round + "record", group);
    std::vector<long long> numbers;
    for (std::size_t at = 0; at < record.size();) {
      std::size_t used = 0;
      numbers.push_back(std::stoll(record.substr(at), &used));
      at += used + (at + used < record.size() ? 1 : 0);
    }
    round_verdict<Communicator> verdict{group, {}, {}, false};
    const auto id = static_cast<std::uint32_t>(numbers.at(0));
    generation_ = static_cast<std::uint64_t>(numbers.at(1));
    std::vector<int> members;
    for (std::size_t k = 2; k + 1 < numbers.size(); k += 2) {
      members.push_back(static_cast<int>(numbers[k]));
      verdict.completed.push_back(static_cast<std::uint64_t>(numbers[k + 1]));
    }
    for (int member : group.world_ranks())
      if (std::find(members.begin(), members.end(), member) == members.end()) verdict.lost.push_back(member);
    verdict.excluded = std::find(members.begin(), members.end(), me) == members.end();
    if (!verdict.excluded) verdict.group = group.regrouped(id, members);
    return verdict;
  }

 private:
  using store_t = std::remove_reference_t<decltype(*std::declval<Communicator&>().store())>;

  // The store's value for `key` once set. Polled: the store fails every
  // WAIT once a rank of the job has died (the job is over, as it assumes),
  // while this is how its survivors go on.
  static std::string read(store_t& store, const std::string& key, const Communicator& group) {
    const auto deadline = std::chrono::steady_clock::now() + 2 * group.timeout();
    for (;;) {
      if (std::optional<std::string> value = store.get(key)) return *value;
      if (std::chrono::steady_clock::now() > deadline)
        throw error(errc::timeout, "the survivors' agreement: no record under '" + key + "' (its leader died?)",
                    {group.transport().rank(), -1, "round_membership"});
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }

  // The leader: every member of `group` checked in, or gone, or late.
  void lead(Communicator& group, const std::string& round) {
    store_t& store = *group.store();
    const auto deadline = std::chrono::steady_clock::now() + group.timeout();
    std::string record;
    std::vector<int> waiting = group.world_ranks();
    std::vector<std::string> answers(waiting.size());
    std::vector<bool> settled(waiting.size(), false);
    for (bool all = false; !all;) {
      all = true;
      const bool late = std::chrono::steady_clock::now() > deadline;
      for (std::size_t k = 0; k < waiting.size(); ++k) {
        if (settled[k]) continue;
        const std::string key = round + "in/" + std::to_string(waiting[k]);
        std::optional<std::string> answer = store.get(key);
        // Read again once its death is seen: a check-in written before the
        // death is in the store by then, so every member would decide alike.
        if (!answer && (late || group.transport().peer_gone_now(waiting[k]))) answer = store.get(key).value_or("-");
        if (answer) {
          answers[k] = *answer;
          settled[k] = true;
        } else {
          all = false;
        }
      }
      if (!all) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const auto generation = store.add(prefix_ + "generations", 1);
    record = std::to_string(group.fresh_id()) + " " + std::to_string(generation);
    for (std::size_t k = 0; k < waiting.size(); ++k)
      if (answers[k] != "-") record += " " + std::to_string(waiting[k]) + ":" + answers[k];
    store.set(round + "record", record);
  }

  std::string prefix_;
  std::uint64_t instance_ = 0;
  std::uint64_t generation_ = 0;  // the recoveries so far: the keys' next round
};

}  // namespace chorus::averaging
