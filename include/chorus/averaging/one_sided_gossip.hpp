// One-sided gossip with push-sum weights (Stochastic Gradient Push, Assran
// et al. 2019; AD-PSGD's asynchrony, Lian et al. 2018) over a tensor window.
// Each rank holds its model x and a weight p (1 at the start, so the
// weights sum to n). After each local step it
//   merges what arrived:  x <- (p x + sum z_in) / (p + sum p_in),  p += sum p_in
//   pushes:               accumulate W_ji p x (and W_ji p) into each
//                         out-neighbour j's slot,  p <- W_ii p
// along a column-stochastic topology (default: one-peer exponential: half
// to one peer per round). An out-neighbour waiting in quiesce() (it
// finished first: window.hpp's in_quiesce) only takes weight in until
// every rank is in, so its share W_ji p is kept here instead (p <- p (W_ii
// + W_ji)): the consensus then weighs what the others train after it
// stopped as it weighs theirs before. So is the share of an out-neighbour
// not ready (window.hpp's ready: the link still carries the last push, or
// the neighbour has two unread): summed here until the link freed, that
// weight would train at no rank meanwhile and land with the model of its
// oldest push (over a link slower than the steps, nearly all the weight
// was in such sums and the consensus fell back to old models). A rank
// whose p fell below 1e-6 (its in-neighbours far slower) skips its push,
// so its float numerator never underflows. It never waits for a
// neighbour: an accumulate lands in the target's memory without the
// target's help, and the target merges whatever has landed at its next
// step.
// Invariants: the numerators p x and the weights p, summed over ranks,
// slots and pending sums, are unchanged by every push and merge, so
// sum p = n and the p-weighted mean of the models holds still while nobody
// steps.
//
// quiesce() (collective) lands and merges every push; finish() is
// quiesce() and then the consensus x = sum p x / sum p on every rank (p
// back to 1). Cost: one message of S bytes per out-neighbour per step, no
// synchronisation; memory: the window's slots (2 entries per in-neighbour).
//
// on_peer_failure = continue_ drops a dead neighbour (peer_loss.hpp): its
// weight and the pushes it never merged are lost; quiesce() scales the
// survivors' weights to sum to their number again (a collective over the
// survivors), which leaves the consensus as the survivors hold it.
#pragma once

#include <chorus/averaging/consensus.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/peer_loss.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/averaging/topology.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/core/error.hpp>
#include <chorus/window/window.hpp>

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace chorus::averaging {

struct one_sided_gossip_options {
  std::optional<averaging::topology> topology{};  // column stochastic; default: one-peer exponential
  codec::any_codec codec{};                       // on the pushed numerators, with error feedback
  peer_failure_policy on_peer_failure = peer_failure_policy::raise;
};

template <class Communicator>
class one_sided_gossip : public scheme_base<one_sided_gossip<Communicator>> {
 public:
  one_sided_gossip(Communicator& comm, parameters model, one_sided_gossip_options options = {})
      : group_(comm.split(0, comm.rank())),
        model_(std::move(model)),
        topology_(options.topology.value_or(averaging::topology::one_peer_exponential(comm.size()))),
        losses_(options.on_peer_failure),
        window_(comm, std::vector<float>(model_.size()),
                window_for(topology_, comm, std::move(options.codec), options.on_peer_failure)) {
    if (topology_.size() != comm.size())
      throw error(errc::invalid_argument, "one_sided_gossip: topology " + topology_.name() + " has " +
                                              std::to_string(topology_.size()) + " ranks, the communicator " +
                                              std::to_string(comm.size()));
    topology_.require(stochastic::column);
    model_.require_on_host("one_sided_gossip");
  }

  double weight() const noexcept { return window_.p(); }
  const averaging::topology& topology() const noexcept { return topology_; }
  std::vector<lost_peer> lost_peers() const { return losses_.list(); }

  void end_step() {
    this->metered(group_, "one_sided_gossip end_step", [&] {
      merge();
      push();
    });
    ++round_;
    this->count_step();
  }

  // Collective: every push made before any rank's quiesce() is merged.
  void quiesce() {
    this->metered(group_, "one_sided_gossip quiesce", [&] {
      window_.quiesce();
      merge();
      if (losses_.tolerated()) renormalise();
    });
  }

  // Collective: quiesce, then every rank takes the consensus sum p x / sum p.
  void finish() {
    quiesce();
    this->metered(group_, "one_sided_gossip finish", [&] { weighted_consensus(group_, model_, window_.p()); });
    window_.set_p(1.0);
  }

 private:
  static window_options window_for(const averaging::topology& graph, const Communicator& comm, codec::any_codec wire,
                                   peer_failure_policy policy) {
    window_options options{.sources = std::vector<int>{}, .codec = std::move(wire)};
    if (graph.size() == comm.size()) options.sources = graph.in_neighbours(comm.rank());
    options.drop_dead_peers = policy == peer_failure_policy::continue_;
    return options;
  }

  // x <- (p x + sum z) / (p + sum p_in), p += sum p_in, over what landed.
  void merge() {
    incoming_.assign(model_.size(), 0.0);
    double arrived = 0.0;
    window_.collect(
        [&](int, std::span<const float> numerator, double p) {
          for (std::size_t k = 0; k < numerator.size(); ++k) incoming_[k] += numerator[k];
          arrived += p;
        },
        true);
    note_losses();
    if (arrived == 0.0) return;
    const double p = window_.p(), total = p + arrived;
    std::vector<float> x = model_.snapshot();
    for (std::size_t k = 0; k < x.size(); ++k)
      x[k] = static_cast<float>((p * static_cast<double>(x[k]) + incoming_[k]) / total);
    model_.copy_from(x);
    window_.set_p(total);
    this->stats_.merges += 1;
  }

  // Accumulates W_ji p x into each ready out-neighbour j's slot, keeps
  // W_ii p and the shares of the out-neighbours in quiesce() or not ready
  // (a lost one's share is lost with it).
  // Not below minimum_weight: a rank whose in-neighbours stopped pushing
  // (finished, or far slower) would halve p every step until the float
  // numerator p x underflowed while p did not, and merging that zero at a
  // real weight collapsed the receiver's model (rank 0 at test accuracy 0.1
  // in run_heterogeneous, where the fast ranks finish first). It holds its
  // weight instead until some arrives.
  void push() {
    if (window_.p() < minimum_weight) return;
    const mixing_matrix& w = topology_.at(round_);
    const int me = group_.rank();
    std::vector<neighbour_weight> to;
    double kept = 0.0;
    for (const weighted_peer& entry : w.column(me)) {
      if (entry.peer != me && !window_.in_quiesce(entry.peer) && window_.ready(entry.peer))
        to.push_back({entry.peer, entry.weight});
      else if (!window_.lost(entry.peer))
        kept += entry.weight;
    }
    if (to.empty()) return;
    numerator_ = model_.snapshot();
    const auto p = static_cast<float>(window_.p());
    for (float& value : numerator_) value *= p;
    (void)window_.accumulate_nonblocking(numerator_, to);  // copied: numerator_ may change at once
    note_losses();
    window_.set_p(window_.p() * kept);
    ++this->stats_.exchanges;
  }

  // The neighbours the window dropped (continue_), recorded as lost.
  void note_losses() {
    for (int rank : window_.dropped()) losses_.record(window_.communicator().world_rank(rank), this->stats_.steps);
  }

  // The survivors' weights scaled to sum to their number.
  void renormalise() {
    note_losses();
    if (losses_.count() == 0) return;
    group_ = group_.without(losses_.ranks());
    double total = window_.p();
    allreduce(group_, std::span<double>(&total, 1), op::sum{});
    window_.set_p(window_.p() * static_cast<double>(group_.size()) / total);
  }

  static constexpr double minimum_weight = 1e-6;  // p x a normal float for any |x| > 1e-32

  Communicator group_;  // collectives: the survivors
  parameters model_;
  averaging::topology topology_;
  peer_losses losses_;
  window<Communicator> window_;
  std::vector<double> incoming_;
  std::vector<float> numerator_;
  std::size_t round_ = 0;
};

template <class C>
one_sided_gossip(C&, parameters, one_sided_gossip_options = {}) -> one_sided_gossip<C>;

}  // namespace chorus::averaging
