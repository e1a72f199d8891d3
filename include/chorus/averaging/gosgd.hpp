// GoSGD (Blot et al. 2016): asynchronous gossip with sum-weights. Each rank
// holds (x_i, a_i), a_i = 1/n at the start. After each local step, with
// probability p, it halves a_i and pushes (x_i, a_i) to a random peer; a rank
// that receives (x_j, a_j) merges it at its next step boundary:
//   x_i <- (a_i x_i + a_j x_j) / (a_i + a_j),   a_i <- a_i + a_j
// Invariant: sum a = 1 and sum a x are unchanged by every exchange once the
// messages in flight have landed. The progress thread receives while the
// trainer computes; with max_in_flight pushes still unmerged a push is
// skipped, so no rank waits for a slow receiver.
//
// quiesce() (collective) is a consistent cut: each rank sends every peer a
// cut behind its pushes, on their tag (UCP keeps a sender's order), merges
// each peer's stream up to that peer's cut and holds what follows until its
// own quiesce() returns (a peer that left first may push again at once;
// merging that push early would count its weight on both sides). finish()
// is quiesce() and then the consensus sum a x / sum a. Between a step and
// quiesce() the scheme is open: a collective over its peers raises
// invalid_argument (comm/pending_merges.hpp).
//
// Membership (docs/averaging.md, "Workers that leave", "... that join",
// "Training that survives a lost worker"): a dead peer is dropped under
// on_peer_failure = continue_ and quiesce() renormalises the survivors'
// weights; a leaver, acked behind every peer's last push, hands its whole
// weight and model to a stayer (leavers go in rank order; one must stay);
// a joiner is admitted by rank 0 between steps, announced to every peer in
// its stream and handed half of rank 0's weight. sum a = 1 over the members
// at every quiesce() in each case. Messages: wire.hpp.
//
// Cost: p (alpha + S beta) per step on average, one message to one peer,
// whatever n is; chosen for many ranks and heterogeneous speeds.
#pragma once

#include <chorus/averaging/admission.hpp>
#include <chorus/averaging/consensus.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/peer_loss.hpp>
#include <chorus/averaging/roster.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/averaging/wire.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/comm/progress_thread.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>
#include <array>
#include <concepts>
#include <cstdint>
#include <deque>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace chorus::averaging {

struct gosgd_options {
  double push_probability = 0.5;  // p
  std::uint64_t seed = 1;         // the peer choice; mixed with the rank
  codec::any_codec codec{};       // on the pushed models
  peer_failure_policy on_peer_failure = peer_failure_policy::raise;
};

template <class Communicator>
class gosgd : public scheme_base<gosgd<Communicator>> {
 public:
  using request = typename Communicator::request;

  // On an NCCL communicator: its host side (scheme.hpp, host_side).
  template <class Other>
    requires(!std::same_as<Other, Communicator> && std::same_as<host_side_t<Other>, Communicator>)
  gosgd(Other& comm, parameters model, gosgd_options options = {})
      : gosgd(host_side<Other>::of(comm), std::move(model), std::move(options)) {}

  // Collective. In a process that joined the running job: admission by
  // the group's rank 0 (the class comment), starting from its model.
  gosgd(Communicator& comm, parameters model, gosgd_options options = {})
      : comm_(comm.joined() ? admission::enter(comm, "gosgd") : comm.split(0, comm.rank())),
        group_(comm_),
        model_(std::move(model)),
        options_(std::move(options)),
        weight_(comm.joined() ? 0.0 : 1.0 / comm_.size()),
        random_(options_.seed * 0x9e3779b97f4a7c15ull +
                static_cast<std::uint64_t>(comm.joined() ? comm_.transport().rank() : comm_.rank())),
        payload_bytes_(options_.codec.encoded_bytes(model_.size())),
        peers_(static_cast<std::size_t>(comm_.size())),
        losses_(options_.on_peer_failure),
        unmerged_(comm_.pending_merges(), "gosgd", comm_.world_ranks()) {
    codec::require_model_codec(options_.codec, "gosgd");
    if (!(options_.push_probability >= 0.0 && options_.push_probability <= 1.0))
      throw error(errc::invalid_argument,
                  "gosgd: push probability must be in [0, 1], got " + std::to_string(options_.push_probability));
    if (comm.joined()) {
      join(comm);
    } else {
      admission::open(comm_, "gosgd");
      if (comm_.rank() == 0) desk_.open(comm_);
      for_each_peer([&](int peer, peer_state&) { post(peer); });
    }
    if (comm_.size() > 1 || desk_.is_open()) progress_ = comm_.progress_thread().add([] { return false; });
  }

  double weight() const noexcept { return weight_; }
  // The peers that left on purpose (leave()), as ranks of the scheme's
  // communicator, in rank order.
  std::vector<int> departed() const {
    std::vector<int> ranks;
    for (int peer = 0; peer < comm_.size(); ++peer)
      if (peers_[static_cast<std::size_t>(peer)].status == standing::departed) ranks.push_back(peer);
    return ranks;
  }
  // The peers this rank went on without (on_peer_failure = continue_).
  std::vector<lost_peer> lost_peers() const { return losses_.list(); }

  void begin_step() {
    require_here("gosgd step");
    comm_.require_merged("gosgd step", unmerged_.key());
    unmerged_.open();
    admit_joiners();
    merge_arrivals();
  }

  void end_step() {
    require_here("gosgd step");
    this->count_step();
    admit_joiners();
    merge_arrivals();
    // With every buffer still in flight (a receiver slow to merge) the push
    // is skipped, not waited for: GoSGD exchanges at random, so a skipped
    // push loses nothing, and a fast rank never waits on a slow one's trainer.
    // (A buffer free here is the one push() takes.) Rank 0's push to a joiner
    // and a leaver's hand-over wait for a buffer: they must go.
    if (std::bernoulli_distribution(options_.push_probability)(random_) && free_buffer() != nullptr)
      push([&] { return random_peer(); });
  }

  // Collective: returns once this rank has merged every push that a peer
  // sent before its own quiesce(), and none sent after.
  void quiesce() {
    require_here("gosgd quiesce");
    cutting_ = true;  // a joiner heard of from here on gets its cut at once
    send_cuts();
    for (int waiting = peer_without_cut(); waiting >= 0; waiting = peer_without_cut()) {
      const auto cut_arrived = [&] {
        merge_arrivals();
        return at(waiting).cut_in || !present(at(waiting));
      };
      comm_.progress_until(cut_arrived, "gosgd quiesce, waiting for the peer's cut (it enters quiesce() or finish())",
                           waiting);
    }
    for (outgoing& sent : in_flight_) comm_.wait(sent.handle, "gosgd push");  // pushes to lost peers were let go
    in_flight_.clear();
    for_each_peer([&](int peer, peer_state& state) {  // resume receiving past each cut
      comm_.wait(state.cut_send, "gosgd cut");
      state.cut_in = false;
      post(peer);
    });
    cutting_ = false;
    unmerged_.close();
    if (const std::vector<int> gone = gone_world_ranks(); !gone.empty()) group_ = group_.without(gone);
    if (losses_.tolerated()) renormalise();
  }

  // Leaves the job on purpose, between steps (instead of finish()): this
  // rank's weight and model go to a peer that stays, after everything
  // pushed to it is merged. Returns once handed over; the scheme is then
  // closed here. Bounded by the timeout; a peer that dies meanwhile is a
  // peer failure (or dropped, under continue_).
  void leave() {
    require_here("gosgd leave");
    this->mark_left();  // from here on: no step, no quiesce(), and a cut is not waited for
    this->metered(comm_, "gosgd leave", [&] {
      announce_leaving();
      const auto answered = [&] {
        merge_arrivals();
        return all_answered();
      };
      comm_.progress_until(answered, "gosgd leave, waiting for the peers' acks (they merge at their steps)");
      hand_over();
    });
    unmerged_.close();
    progress_.release();
  }

  // Collective: drain, then every rank takes the consensus sum a x / sum a.
  void finish() {
    require_here("gosgd finish");
    this->metered(comm_, "gosgd finish", [&] {
      quiesce();
      weighted_consensus(group_, model_, weight_);
    });
    weight_ = 1.0 / group_.size();
  }

 private:
  static constexpr int gossip_tag = 1;

  struct peer_state {
    wire::message incoming;
    request receive;
    std::uint64_t pushed_to = 0;    // pushes this rank sent the peer, ever
    std::uint64_t merged_from = 0;  // pushes merged from the peer, ever
    bool cut_in = false;            // its cut arrived: hold the rest until our quiesce() returns
    // live; leaving (push no more to it, its done follows); departed (its
    // done arrived: forgotten); lost (dead and dropped, on_peer_failure =
    // continue_); absent (this rank joined after it was gone: never heard from)
    standing status = standing::live;
    bool acked = false;  // (this rank leaving) its ack arrived
    bool stays = false;  // ... saying it stays
    wire::message cut_out;
    request cut_send;
    wire::message note_out;  // a leaving, an ack or a done (one at a time: each follows the one before)
    request note_send;
  };
  struct outgoing {
    wire::message bytes;
    request handle;
    int peer = -1;
  };

  peer_state& at(int peer) { return peers_[static_cast<std::size_t>(peer)]; }

  // Every peer still sending: live or leaving.
  template <class F>
  void for_each_peer(F&& visit) {
    for (int peer = 0; peer < comm_.size(); ++peer)
      if (peer != comm_.rank() && present(at(peer))) visit(peer, at(peer));
  }
  static bool present(const peer_state& state) noexcept { return still_sending(state.status); }

  void require_here(const char* operation) const { this->require_not_left(operation, comm_.world_rank(comm_.rank())); }

  std::vector<int> gone_world_ranks() const {
    std::vector<int> gone = losses_.ranks();
    for (int peer = 0; peer < comm_.size(); ++peer)
      if (const standing status = peers_[static_cast<std::size_t>(peer)].status;
          status == standing::departed || status == standing::absent)
        gone.push_back(comm_.world_rank(peer));
    return gone;
  }

  // --- joiners (the class comment) -------------------------------------------
  // The group as rank 0 sends it to a joiner: the collectives' next
  // sequence number, then each member's transport rank and whether it is
  // gone (dead, departed or leaving), then the collectives' members.
  std::vector<std::int64_t> describe_group() const {
    admission::group_description group{group_.sequence(), {}, {}, group_.world_ranks()};
    for (int peer = 0; peer < comm_.size(); ++peer) {
      const peer_state& state = peers_[static_cast<std::size_t>(peer)];
      group.members.push_back(comm_.world_rank(peer));
      if (peer != comm_.rank() && state.status != standing::live) group.gone.push_back(group.members.back());
    }
    return group.words();
  }

  // Rank 0, between steps: every joiner whose introduction arrived. From
  // here on a joiner holds weight: its death is a peer's like any other.
  void admit_joiners() {
    while (const std::optional<int> joiner = desk_.next(comm_)) {
      forget_sent_welcomes();
      welcomes_.push_back({describe_group(), request{}});
      const int newcomer = learn(*joiner);
      welcomes_.back().handle = comm_.isend(std::span<const std::int64_t>(welcomes_.back().words), newcomer,
                                            admission::welcome_tag, receive_kind::standing);
      for_each_peer([&](int peer, peer_state& state) {
        if (peer != newcomer && state.status == standing::live)
          note(peer, wire::kind::joined, static_cast<double>(*joiner));
      });
      push([&] { return newcomer; });  // half the weight: its start
    }
  }

  // Welcomes sent, or whose joiner died (its death is noticed as a peer's).
  void forget_sent_welcomes() {
    std::erase_if(welcomes_, [&](welcome& sent) {
      try {
        return comm_.test(sent.handle);
      } catch (const error&) {
        return true;
      }
    });
  }

  // A joiner (transport rank), made a peer; returns its rank in comm_.
  int learn(int joiner) {
    comm_ = comm_.with(joiner);
    group_ = group_.with(joiner);
    const int peer = comm_.size() - 1;
    peers_.emplace_back();
    post(peer);
    if (this->left()) note(peer, wire::kind::leaving, 0.0);  // it must ack too
    if (cutting_) send_cut(peer, at(peer));
    return peer;
  }

  // The joiner's side: introduced to rank 0, it takes the group as rank 0
  // sees it, then rank 0's first push, its start.
  void join(const Communicator& world) {
    std::vector<std::int64_t> words(3 + 3 * static_cast<std::size_t>(comm_.transport().capacity()));
    this->metered(comm_, "gosgd join", [&] {
      std::array<request, 1> welcomes{comm_.irecv(std::span(words), 0, admission::welcome_tag)};
      admission::welcomed(comm_, std::span(welcomes), {0},
                          "gosgd join, waiting for the welcome of the group's rank 0 (it admits joiners)");
      words.resize(welcomes[0].received_bytes() / sizeof(std::int64_t));
    });
    const admission::group_description group =
        admission::group_description::parse(words, comm_.transport().capacity(), comm_.transport().rank(),
                                            {comm_.transport().rank(), comm_.world_rank(0), "gosgd join"});
    const std::vector<int>& gone = group.gone;
    comm_ = world.joined_group(comm_.id(), group.members);
    group_ = world.joined_group(comm_.id(), group.collective, group.sequence);
    peers_.resize(static_cast<std::size_t>(comm_.size()));
    for (int peer = 0; peer + 1 < comm_.size(); ++peer)
      if (std::find(gone.begin(), gone.end(), comm_.world_rank(peer)) != gone.end()) at(peer).status = standing::absent;
    for_each_peer([&](int peer, peer_state&) {
      comm_.admit(comm_.world_rank(peer));  // a joiner after this one's start
      post(peer);
    });
    comm_.progress_until(
        [&] {
          merge_arrivals();
          return at(0).merged_from > 0 || !present(at(0));
        },
        "gosgd join, waiting for rank 0's first push", 0);
  }

  void post(int peer) {
    peer_state& state = at(peer);
    if (state.incoming.capacity() != payload_bytes_) state.incoming = wire::message(payload_bytes_);
    state.receive = comm_.irecv(state.incoming.buffer(), peer, gossip_tag, receive_kind::standing);
  }

  // A peer to push to (live, not leaving) chosen uniformly, or -1 when none is left.
  int random_peer() {
    int live = 0;
    for_each_peer([&](int, peer_state& state) { live += state.status == standing::live ? 1 : 0; });
    if (live == 0) return -1;
    int pick = std::uniform_int_distribution<int>(0, live - 1)(random_);
    for (int peer = 0; peer < comm_.size(); ++peer)
      if (peer != comm_.rank() && at(peer).status == standing::live && pick-- == 0) return peer;
    return -1;
  }

  // Sends half this rank's weight with its model (all of it when leaving)
  // to the peer `choose` names (none: -1). The peer is chosen once a buffer
  // is free: waiting for one merges arrivals, and a peer's leaving among
  // them must rule it out (a push behind this rank's ack would be lost).
  template <class Choose>
  void push(Choose&& choose, bool whole = false) {
    outgoing* message = free_buffer();
    if (message == nullptr) message = &oldest_sent();  // may merge arrivals: before the halving
    const int peer = choose();
    if (peer < 0) return;
    const double sent = whole ? weight_ : weight_ / 2;
    weight_ -= sent;
    if (message->bytes.capacity() != payload_bytes_) message->bytes = wire::message(payload_bytes_);
    encode(message->bytes.payload());
    const auto bytes = message->bytes.write(wire::kind::push, ++at(peer).pushed_to, sent, payload_bytes_);
    message->peer = peer;
    try {
      this->metered(comm_, "gosgd push", [&] { message->handle = comm_.isend(bytes, peer, gossip_tag); });
    } catch (const error& failure) {
      drop_named(failure);  // the halved weight went with it
      return;
    }
    ++this->stats_.exchanges;
  }

  // A buffer whose push is done (or a new one, up to max_in_flight), or null.
  outgoing* free_buffer() {
    for (outgoing& sent : in_flight_)
      if (sent_or_lost(sent)) return &sent;
    if (in_flight_.size() < max_in_flight) return &in_flight_.emplace_back();
    return nullptr;
  }

  // The oldest push's buffer, once it is sent. Two ranks pushing to each
  // other each hold the other's previous model unmerged (their one posted
  // receive is full), so a large push completes only once the receiver
  // merges and posts again: waiting without merging would deadlock.
  outgoing& oldest_sent() {
    outgoing& oldest = in_flight_.front();
    const auto sent = [&] {
      merge_arrivals();
      return sent_or_lost(oldest);
    };
    comm_.progress_until(sent, "gosgd push", oldest.peer);
    return oldest;
  }

  // Whether a push's buffer is free: sent, or its peer died (let go).
  bool sent_or_lost(outgoing& message) {
    try {
      return comm_.test(message.handle);
    } catch (const error& failure) {
      return drop_named(failure) == message.peer;
    }
  }

  // Whether a peer's next message is in; a dead peer is dropped here
  // when the policy goes on without it. (What it sent before it died has
  // been received: the transport drains before it declares a peer failed.)
  bool arrived(peer_state& state) {
    try {
      return comm_.test(state.receive);
    } catch (const error& failure) {
      drop_named(failure);
      return false;
    }
  }

  // In a catch block: drops the dead peer `failure` names, when the policy
  // goes on without it (else rethrows); returns that peer.
  int drop_named(const error& failure) { return drop(losses_.absorb(comm_, failure, this->stats_.steps)); }

  // Forgets a dead peer: its posted receive, its cut and the pushes to it
  // are let go (the transport closed its endpoint: they cannot complete).
  int drop(int peer) {
    peer_state& state = at(peer);
    if (present(state)) state.status = standing::lost;  // a departed peer stays departed
    state.receive = request{};
    state.cut_send = request{};
    state.note_send = request{};
    for (outgoing& sent : in_flight_)
      if (sent.peer == peer) sent.handle = request{};
    return peer;
  }

  // The survivors' weights, scaled to sum 1 again: the lost share (the dead
  // peers' weights and their unmerged pushes) is spread over the survivors
  // in proportion, which leaves the consensus sum a x / sum a as it was.
  // Collective over the survivors (group_, which quiesce() made without the
  // lost and departed), who agree on who is lost (quiesce's cuts).
  void renormalise() {
    double total = weight_;
    this->metered(comm_, "gosgd renormalise", [&] { allreduce(group_, std::span<double>(&total, 1), op::sum{}); });
    weight_ /= total;
  }

  void encode(std::span<std::byte> out) {
    flat_.resize(model_.size());
    model_.copy_to(flat_);
    options_.codec.encode(flat_, out);
  }

  // Takes in every message that has arrived from a peer before its cut;
  // true if there was one.
  bool merge_arrivals() {
    bool took = false;
    for_each_peer([&](int peer, peer_state& state) {
      while (present(state) && !state.cut_in && arrived(state)) {
        take(peer, state);
        took = true;
      }
    });
    return took;
  }

  void take(int peer, peer_state& state) {
    const wire::reader from{comm_.world_rank(comm_.rank()), comm_.world_rank(peer), "gosgd merge"};
    const wire::header head = state.incoming.read(
        state.receive.received_bytes(),
        {wire::kind::push, wire::kind::cut, wire::kind::leaving, wire::kind::ack, wire::kind::done, wire::kind::joined},
        payload_bytes_, from);
    if (head.what == wire::kind::cut) {
      wire::expect_sequence(head, state.merged_from, from);
      if (this->left()) return post(peer);  // a leaver takes part in no quiesce()
      state.cut_in = true;                  // no receive posted until our quiesce() returns: the rest is past the cut
      return;
    }
    if (head.what != wire::kind::push) return take_leave_note(peer, state, head, from);
    wire::expect_sequence(head, state.merged_from + 1, from);
    merge(wire::weight_of(head, from), std::as_const(state.incoming).payload().first(payload_bytes_));
    ++state.merged_from;
    post(peer);
  }

  void merge(double theirs, std::span<const std::byte> payload) {
    if (theirs == 0.0) return;  // no weight: nothing of the sender's model to take (and 0/0 if ours is 0 too)
    flat_.resize(model_.size());
    options_.codec.decode(payload, flat_);
    const auto share = static_cast<float>(theirs / (weight_ + theirs));
    model_.for_each_part(std::span<const float>(flat_), [&](std::span<float> mine, std::span<const float> other) {
      for (std::size_t k = 0; k < mine.size(); ++k) mine[k] += share * (other[k] - mine[k]);
    });
    weight_ += theirs;
    ++this->stats_.merges;
  }

  // A leaver's messages and the answers to them (the class comment's
  // protocol), and rank 0's word of a joiner.
  void take_leave_note(int peer, peer_state& state, const wire::header& head, const wire::reader& from) {
    wire::expect_sequence(head, state.merged_from, from);  // behind every push it sent
    if (head.what == wire::kind::joined) {
      const int joiner = wire::rank_of(head, comm_.transport().capacity(), from);
      for (int member = 0; member < comm_.size(); ++member)
        if (comm_.world_rank(member) == joiner)
          from.fail("gosgd: rank 0 announced rank " + std::to_string(joiner) + " as a joiner; it is a member");
      comm_.admit(joiner);
      post(peer);  // before learn(): peers_ may grow, and `state` with it
      learn(joiner);
      return;
    }
    if (head.what == wire::kind::leaving) {
      state.status = standing::leaving;
      note(peer, wire::kind::ack, this->left() ? 0.0 : 1.0);
    } else if (head.what == wire::kind::ack) {
      if (!this->left()) from.fail("gosgd: an ack arrived, and this rank is not leaving");
      state.acked = true;
      state.stays = head.value != 0.0;
    } else {  // done: after its last push
      if (state.status != standing::leaving) from.fail("gosgd: a done arrived from a peer that had not said it leaves");
      state.status = standing::departed;
      state.receive = request{};
      state.cut_send = request{};
      state.note_send = request{};
      return;
    }
    post(peer);
  }

  // A header-only message to a peer; the one before it to that peer is
  // sent by then (each answers or follows the one before).
  void note(int peer, wire::kind what, double value) {
    peer_state& state = at(peer);
    comm_.wait(state.note_send, "gosgd leave");
    state.note_send = comm_.isend(state.note_out.write(what, state.pushed_to, value, 0), peer, gossip_tag);
  }

  // A peer whose cut arrived (it is in quiesce(), which this rank will not
  // enter) sends nothing more but its ack before this rank's done: read on.
  void announce_leaving() {
    for_each_peer([&](int peer, peer_state& state) {
      if (std::exchange(state.cut_in, false)) post(peer);
      note(peer, wire::kind::leaving, 0.0);
    });
  }

  // A peer that acked this rank's leaving and does not leave itself.
  static bool staying(const peer_state& state) noexcept {
    return state.acked && state.stays && state.status == standing::live;
  }

  // Every peer acked; every leaver of lower rank handed over (its done).
  bool all_answered() {
    bool all = true;
    for_each_peer([&](int peer, peer_state& state) { all &= state.acked && (staying(state) || peer > comm_.rank()); });
    return all;
  }

  // The whole weight to a peer that stays, then a done to every peer; the
  // sends to stayers are waited for (a leaver lets its own go).
  void hand_over() {
    push(
        [&] {
          int heir = -1;
          for_each_peer([&](int peer, peer_state& state) {
            if (heir < 0 && staying(state)) heir = peer;
          });
          if (heir < 0)
            throw error(errc::invalid_argument,
                        "gosgd leave: no peer stays to take this worker's weight (finish() instead)",
                        {comm_.world_rank(comm_.rank()), -1, "gosgd leave"});
          return heir;
        },
        true);
    for_each_peer([&](int peer, peer_state&) { note(peer, wire::kind::done, 0.0); });
    for (outgoing& sent : in_flight_)
      if (staying(at(sent.peer))) comm_.wait(sent.handle, "gosgd leave, handing over");
    in_flight_.clear();
    for_each_peer([&](int, peer_state& state) {
      if (staying(state)) comm_.wait(state.note_send, "gosgd leave");
      state.receive = request{};
    });
  }

  void send_cuts() {
    for_each_peer([&](int peer, peer_state& state) {
      if (state.status == standing::leaving) return;  // it takes part in no quiesce()
      try {
        send_cut(peer, state);
      } catch (const error& failure) {
        drop_named(failure);
      }
    });
  }

  // A cut tells the peer how many pushes this rank sent it in all.
  void send_cut(int peer, peer_state& state) {
    state.cut_send = comm_.isend(state.cut_out.write(wire::kind::cut, state.pushed_to, 0.0, 0), peer, gossip_tag);
  }

  // The first peer whose cut (or, leaving, its done) has not arrived, or -1.
  int peer_without_cut() const {
    for (int peer = 0; peer < comm_.size(); ++peer) {
      const peer_state& state = peers_[static_cast<std::size_t>(peer)];
      if (peer != comm_.rank() && !state.cut_in && present(state)) return peer;
    }
    return -1;
  }

  static constexpr std::size_t max_in_flight = 4;

  Communicator comm_;   // point to point with the peers, dead ones included
  Communicator group_;  // collectives: the survivors (the same as comm_ until a loss)
  parameters model_;
  gosgd_options options_;
  double weight_;
  std::mt19937_64 random_;
  std::size_t payload_bytes_;
  std::deque<peer_state> peers_;  // grows by joiners without moving a peer's posted receive
  std::deque<outgoing> in_flight_;
  admission::desk<Communicator> desk_;  // rank 0: joiners' introductions
  struct welcome {
    std::vector<std::int64_t> words;  // describe_group()
    request handle;
  };
  std::deque<welcome> welcomes_;
  bool cutting_ = false;  // in quiesce(), cuts sent
  peer_losses losses_;
  std::vector<float> flat_;
  progress_thread::registration progress_;
  pending_merges::scheme unmerged_;  // open from a step until quiesce()
};

template <class C>
gosgd(C&, parameters, gosgd_options = {}) -> gosgd<host_side_t<C>>;

}  // namespace chorus::averaging
