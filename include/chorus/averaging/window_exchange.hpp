// window_exchange: neighbour_exchange's rounds (start(), compute, finish())
// through a tensor window instead of messages: start() puts the encoded
// model into each out-neighbour's slot, finish() waits for an entry from
// each in-neighbour of the round, reads it, and waits until its own entries
// are written. The window is ordered, so a
// neighbour a round ahead waits (queued on its side) until this rank has
// read the round before: rounds stay rounds, as message tags keep them
// apart in neighbour_exchange. Same codec, no error feedback, the same
// decode: a scheme mixes bit for bit as over messages.
//
// Cost per round: as neighbour_exchange (one entry of the encoded model per
// out-neighbour), without a receive posted per round; memory: the window's
// two entries per in-neighbour of any phase of the topology.
#pragma once

#include <chorus/averaging/scheme.hpp>
#include <chorus/averaging/topology.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/core/error.hpp>
#include <chorus/window/window.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace chorus::averaging {

template <class Communicator>
class window_exchange {
 public:
  window_exchange(Communicator& comm, const averaging::topology& graph, std::size_t elements,
                  codec::any_codec wire = {})
      : wire_(std::move(wire)),
        window_(host_side<Communicator>::of(comm), std::vector<float>(elements),
                {.sources = graph.size() == comm.size() ? graph.in_neighbours(comm.rank()) : std::vector<int>{},
                 .codec = wire_,
                 .error_feedback = false,
                 .ordered = true}),
        me_(comm.rank()) {
    codec::require_model_codec(wire_, "window_exchange (D-PSGD on a window)");
  }

  const codec::any_codec& wire() const noexcept { return wire_; }

  // What this rank's own model looks like after the codec (its neighbours
  // see exactly this), for the last start().
  void decoded_self(std::span<float> out) const {
    outgoing_.resize(wire_.encoded_bytes(out.size()));
    wire_.encode(sent_, outgoing_);
    wire_.decode(outgoing_, out);
  }

  void start(const mixing_matrix& w, std::span<const float> values) {
    if (open_) throw error(errc::invalid_argument, "window_exchange: start() before the previous round's finish()");
    if (w.size() != window_.communicator().size())
      throw error(errc::invalid_argument, "window_exchange: a mixing matrix for " + std::to_string(w.size()) +
                                              " ranks on a communicator of " +
                                              std::to_string(window_.communicator().size()));
    senders_.clear();
    for (const weighted_peer& from : w.row(me_))
      if (from.peer != me_) senders_.push_back(from);
    std::vector<neighbour_weight> to;
    for (const weighted_peer& target : w.column(me_))
      if (target.peer != me_) to.push_back({target.peer, 1.0});
    if (wire_) sent_.assign(values.begin(), values.end());
    if (!to.empty()) window_.put_nonblocking(values, to);
    open_ = true;
  }

  // Waits for the round; then on_model(peer, W_me,peer, decoded model) for
  // each in-neighbour other than this rank, in row order.
  template <class OnModel>
  void finish(OnModel&& on_model) {
    if (!open_) throw error(errc::invalid_argument, "window_exchange: finish() without start()");
    open_ = false;
    ranks_.clear();
    for (const weighted_peer& from : senders_) ranks_.push_back(from.peer);
    if (!ranks_.empty()) window_.wait_versions(1, ranks_);
    std::size_t k = 0;
    window_.collect_from(
        ranks_, [&](int peer, std::span<const float> model, double) { on_model(peer, senders_[k++].weight, model); });
    // This round's entries must be written before the next round (or the
    // end): a target that lags keeps them queued here, and a rank that
    // finished its rounds would leave it waiting for them for ever. (The
    // two-sided exchange waits for its sends the same way.)
    window_.wait_pending();
  }

 private:
  codec::any_codec wire_;
  window<host_side_t<Communicator>> window_;  // an NCCL communicator's: the chorus one it was made from
  int me_;
  std::vector<weighted_peer> senders_;
  std::vector<int> ranks_;
  std::vector<float> sent_;
  mutable std::vector<std::byte> outgoing_;
  bool open_ = false;
};

}  // namespace chorus::averaging
