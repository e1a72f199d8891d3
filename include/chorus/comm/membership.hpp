// group_membership: how a group changes while the job runs, without a
// collective: the survivors of lost members (without), a group agreed on
// afresh (regrouped), a joiner admitted and appended (admit, with), and a
// joiner's own view of the group it joins (joined_group). The asynchronous
// schemes change their groups through these (averaging/admission.hpp,
// averaging/round_membership.hpp, averaging/peer_loss.hpp); split(), the collective way, is the
// communicator's. A base of basic_communicator (comm/communicator.hpp),
// which it works on through self().
//
// A joiner's introduction: what a rank publishes in the store under
// address_key(rank), "<process identity>\n<transport address>".
#pragma once

#include <chorus/bootstrap/store.hpp>
#include <chorus/comm/member_list.hpp>
#include <chorus/comm/tag.hpp>
#include <chorus/core/error.hpp>
#include <chorus/transport/peer_process.hpp>
#include <chorus/transport/transport.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus {

namespace detail {
// Where each rank publishes its process identity and worker address (connect.hpp).
inline std::string address_key(int rank) { return "chorus/address/" + std::to_string(rank); }

// What a rank publishes there, its introduction. Empty when the text does
// not parse.
struct introduction_parts {
  transport::process_identity process;
  std::span<const std::byte> address;  // into the parsed text
};
inline std::optional<introduction_parts> parse_introduction(std::string_view text) {
  const std::size_t split = text.find('\n');
  if (split == std::string_view::npos) return std::nullopt;
  auto process = transport::process_identity::decode(text.substr(0, split));
  if (!process) return std::nullopt;
  return introduction_parts{std::move(*process), std::as_bytes(std::span(text.substr(split + 1)))};
}
}  // namespace detail

template <class Communicator, transport::Transport T>
class group_membership {
 public:
  // The group without the members whose transport (world) ranks are in
  // `lost`, made locally, without a message: every survivor must pass the
  // same set, which nothing here checks (the caller agrees on it first, as
  // GoSGD's quiesce() does through its cuts). It keeps this communicator's id and
  // continues its sequence numbers, so it takes this one's place: the two
  // must not both run collectives from here on. Not collective.
  Communicator without(std::span<const int> lost) const {
    Communicator survivors = self();
    survivors.members_.clear();
    survivors.layout_.reset();
    survivors.rank_ = -1;
    for (int member : self().members_) {
      if (std::find(lost.begin(), lost.end(), member) != lost.end()) continue;
      if (member == self().world_rank(self().rank_)) survivors.rank_ = static_cast<int>(survivors.members_.size());
      survivors.members_.push_back(member);
    }
    if (survivors.rank_ < 0)
      throw error(errc::invalid_argument, "without: this rank is among the lost",
                  {self().transport().rank(), -1, "without"});
    if (self().ring_) self().ring_->set_members(survivors.members_.to_vector(), survivors.rank_);
    return survivors;
  }

  // The group of the members `members` (transport ranks, this process among
  // them, in that order) under communicator id `id`, its sequence numbers
  // afresh: what every member makes alike from a list they agreed on, where
  // a failure left the old group's collectives at different points on
  // different members (a message still in flight under the old id never
  // matches the new one's). Not collective.
  Communicator regrouped(std::uint32_t id, std::vector<int> members) const {
    const auto mine = std::find(members.begin(), members.end(), self().transport().rank());
    if (mine == members.end())
      throw error(errc::invalid_argument, "regrouped: this process is not among the members",
                  {self().transport().rank(), -1, "regrouped"});
    Communicator group;
    group.world_ = self().world_;
    group.id_ = id;
    group.rank_ = static_cast<int>(mine - members.begin());
    group.members_ = member_list(std::move(members));
    group.open_ring();
    return group;
  }

  // A communicator id that no live group holds, from the job's counter, as
  // split() takes them. Not collective: the caller tells the members.
  std::uint32_t fresh_id() const {
    const std::int64_t counter = self().world_->store ? self().world_->store->add("chorus/communicator-ids", 1)
                                                      : (self().world_->local_ids += 1);
    return tag::id_after(static_cast<std::uint32_t>((counter - 1) % tag::max_id), 0);
  }

  // Whether this process joined the job while it ran (CHORUS_JOIN=1): its
  // world holds the ranks it found, but they never run a collective with
  // it; an asynchronous scheme admits it instead (averaging/admission.hpp).
  bool joined() const noexcept { return self().world_->joined; }
  // This rank's process identity and worker address, as published in the
  // store: what a joiner sends the ranks that admit it.
  std::span<const std::byte> introduction() const noexcept {
    return std::as_bytes(std::span(self().world_->introduction));
  }

  // Whether the transport can reach a process that joins the running job.
  static constexpr bool admits_joiners = requires(T& t, int peer) { t.connected(peer); };
  // Makes a joiner (transport rank `world_rank`) reachable from this
  // process, from the introduction it sent. Any thread.
  void admit(int world_rank, std::span<const std::byte> introduction) {
    if constexpr (!admits_joiners)
      throw error(errc::unavailable, "this transport runs a fixed set of ranks (a simulation): nobody joins",
                  {self().transport().rank(), world_rank, "admit"});
    const auto parts =
        detail::parse_introduction({reinterpret_cast<const char*>(introduction.data()), introduction.size()});
    if (!parts)
      throw error(errc::mismatch, "a joiner's introduction does not parse",
                  {self().transport().rank(), world_rank, "admit"});
    if constexpr (admits_joiners) self().transport().admit(world_rank, parts->process, parts->address);
  }
  // The same from what the joiner published in the job's store, unless
  // this process reaches it already.
  void admit(int world_rank) {
    if constexpr (admits_joiners)
      if (self().transport().connected(world_rank)) return;
    if (self().store() == nullptr)
      throw error(errc::invalid_argument, "admitting a joiner needs the job's store",
                  {self().transport().rank(), world_rank, "admit"});
    const std::string published = self().store()->wait(detail::address_key(world_rank), self().timeout());
    admit(world_rank, std::as_bytes(std::span(published)));
  }

  // The group with one more member at the end, transport rank `world_rank`
  // (a joiner this process admitted): the mirror of without(), made
  // locally; same id, same sequence numbers. Not collective.
  Communicator with(int world_rank) const {
    Communicator grown = self();
    grown.members_.push_back(world_rank);
    grown.layout_.reset();
    if (self().ring_) self().ring_->set_members(grown.members_.to_vector(), grown.rank_);
    return grown;
  }

  // A joiner's view of a group it joins: communicator `id` whose members
  // (transport ranks) are `members`, then this process, last. Point to
  // point only: the members' own view holds it once they admit it.
  // `sequence`: the members' next sequence number, for collectives.
  Communicator joined_group(std::uint32_t id, std::vector<int> members, std::uint32_t sequence = 1) const {
    Communicator group;
    group.world_ = self().world_;
    group.id_ = id;
    group.sequence_ = sequence;
    group.members_ = member_list(std::move(members));
    group.rank_ = static_cast<int>(group.members_.size());
    group.members_.push_back(self().transport().rank());
    group.open_ring();
    return group;
  }

 private:
  const Communicator& self() const noexcept { return static_cast<const Communicator&>(*this); }
};

}  // namespace chorus
