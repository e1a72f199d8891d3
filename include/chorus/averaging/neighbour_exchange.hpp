// neighbour_exchange: one round of sending a model to the out-neighbours of
// a mixing matrix and receiving the in-neighbours' models, split into
// start() and finish() so the trainer computes in between. The building
// block of D-PSGD and of user schemes (push-sum, ...).
//
//   neighbour_exchange<communicator> exchange(comm, model_size, wire);
//   exchange.start(w, values);                  // encode once, post all
//   ...                                         // compute meanwhile
//   exchange.finish([&](int peer, double weight, std::span<const float> model) {...});
//
// Cost per round: max(in, out degree) alpha + out-degree * S beta, S the
// encoded model size; with one peer (one-peer exponential graph) a single
// message each way, whatever n is. While a round is open the communicator's
// progress thread moves large (rendezvous) messages so they overlap the
// computation. `values` is encoded in start(), so the caller may change it
// right away. Rounds must be finished in order; round r's messages carry
// tag r mod 2^16 so that a fast neighbour's next round cannot be mistaken
// for this one.
#pragma once

#include <chorus/averaging/topology.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/comm/progress_thread.hpp>
#include <chorus/core/error.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace chorus::averaging {

template <class Communicator>
class neighbour_exchange {
 public:
  using request = typename Communicator::request;

  neighbour_exchange(Communicator& comm, std::size_t elements, codec::any_codec wire = {})
      : comm_(comm), elements_(elements), wire_(std::move(wire)), message_bytes_(wire_.encoded_bytes(elements)) {
    codec::require_model_codec(wire_, "neighbour_exchange (D-PSGD, push-sum)");
  }

  std::size_t message_bytes() const noexcept { return message_bytes_; }
  const codec::any_codec& wire() const noexcept { return wire_; }

  // What this rank's own model looks like after the codec (its neighbours
  // see exactly this): schemes mix against it to keep the average exact.
  void decoded_self(std::span<float> out) const { wire_.decode(outgoing_, out); }

  void start(const mixing_matrix& w, std::span<const float> values) {
    if (open_) throw error(errc::invalid_argument, "neighbour_exchange: start() before the previous round's finish()");
    if (w.size() != comm_.size())
      throw error(errc::invalid_argument, "neighbour_exchange: a mixing matrix for " + std::to_string(w.size()) +
                                              " ranks on a communicator of " + std::to_string(comm_.size()));
    if (values.size() != elements_)
      throw error(errc::invalid_argument, "neighbour_exchange: " + std::to_string(values.size()) +
                                              " values for a model of " + std::to_string(elements_));
    outgoing_.resize(message_bytes_);
    wire_.encode(values, outgoing_);
    const int me = comm_.rank();
    const int tag = static_cast<int>(round_ & 0xffff);
    senders_.clear();
    for (const weighted_peer& from : w.row(me))
      if (from.peer != me) senders_.push_back(from);
    incoming_.resize(senders_.size());
    requests_.clear();
    for (std::size_t k = 0; k < senders_.size(); ++k) {
      incoming_[k].resize(message_bytes_);
      requests_.push_back(comm_.irecv(std::span(incoming_[k]), senders_[k].peer, tag));
    }
    for (const weighted_peer& to : w.column(me))
      if (to.peer != me) requests_.push_back(comm_.isend(std::span<const std::byte>(outgoing_), to.peer, tag));
    if (!requests_.empty()) progress_ = comm_.progress_thread().add([] { return false; });
    open_ = true;
  }

  // Waits for the round; then on_model(peer, W_me,peer, decoded model) for
  // each in-neighbour other than this rank, in row order.
  template <class OnModel>
  void finish(OnModel&& on_model) {
    if (!open_) throw error(errc::invalid_argument, "neighbour_exchange: finish() without start()");
    open_ = false;
    ++round_;
    comm_.wait_all(std::span<request>(requests_), "neighbour_exchange");
    progress_.release();
    decoded_.resize(elements_);
    for (std::size_t k = 0; k < senders_.size(); ++k) {
      comm_.expect_bytes(requests_[k], message_bytes_, "neighbour_exchange");
      wire_.decode(incoming_[k], decoded_);
      on_model(senders_[k].peer, senders_[k].weight, std::span<const float>(decoded_));
    }
  }

 private:
  Communicator& comm_;
  std::size_t elements_;
  codec::any_codec wire_;
  std::size_t message_bytes_;
  std::vector<std::byte> outgoing_;
  std::vector<std::vector<std::byte>> incoming_;
  std::vector<float> decoded_;
  std::vector<weighted_peer> senders_;
  std::vector<request> requests_;
  progress_thread::registration progress_;
  std::size_t round_ = 0;
  bool open_ = false;
};

}  // namespace chorus::averaging
