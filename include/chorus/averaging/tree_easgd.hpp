// TreeEASGD (Zhang, Choromanska, LeCun 2015; Zhang 2016, ch. 5): elastic
// averaging on a tree of fan-out d instead of one centre. Rank 0 is the
// root; rank r's parent is (r - 1) / d, its children r d + 1 .. r d + d.
// Every node trains. With the elastic exchange of EASGD (the asker sends x,
// the other side answers d = alpha (x - mine) and adds it, the asker
// subtracts it: easgd.hpp, elastic_answer):
//   every tau_up steps    each node pulls toward its parent (it asks its parent)
//   every tau_down steps  each node pushes toward its children (it asks each child)
// The root's model is the one to keep: finish() broadcasts it.
//
// Order, so that the result is a closed form of the steps and nothing
// waits in a cycle: at a step with an upward exchange a node first answers
// its children in rank order, then asks its parent (leaves first, the root
// last); at a step with a downward one it first answers its parent, then
// asks its children in rank order (the root first). Upward before downward
// when a step has both. Exchanges run on the trainer's thread at end_step(),
// between the trainer's updates, so they never race with it; a node waits
// only for its neighbours in the tree, all ranks take the same number of steps.
//
// Cost per upward round: every edge carries 2 S (x up, d down), a node with
// c children serves c exchanges, and a round takes depth log_d(n) hops:
// about log_d(n) d (2 alpha + 2 S beta); the downward round the same. The
// root carries d 2 S per round instead of async EASGD's server (n-1) 2 S.
#pragma once

#include <chorus/averaging/easgd.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/averaging/wire.hpp>
#include <chorus/collective/broadcast/broadcast.hpp>
#include <chorus/core/error.hpp>

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace chorus::averaging {

struct tree_easgd_options {
  double alpha = 0.05;         // elastic force
  std::uint64_t tau_up = 4;    // steps between pulls toward the parent
  std::uint64_t tau_down = 4;  // steps between pushes toward the children
  int fanout = 2;              // d
};

template <class Communicator>
class tree_easgd : public scheme_base<tree_easgd<Communicator>> {
 public:
  using request = typename Communicator::request;

  // Collective: every rank starts from the root's model.
  tree_easgd(Communicator& comm, parameters model, tree_easgd_options options = {})
      : comm_(comm.split(0, comm.rank())),
        model_(std::move(model)),
        options_(options),
        bytes_(model_.size() * sizeof(float)),
        asked_(bytes_),
        answer_(bytes_),
        incoming_(bytes_),
        reply_(bytes_) {
    require_elastic(options_.alpha, options_.tau_up, "tree_easgd");
    require_elastic(options_.alpha, options_.tau_down, "tree_easgd");
    if (options_.fanout < 1)
      throw error(errc::invalid_argument,
                  "tree_easgd: fan-out must be at least 1, got " + std::to_string(options_.fanout));
    std::vector<float> start = model_.snapshot();
    this->metered(comm_, "tree_easgd start", [&] { broadcast(comm_, std::span<float>(start), 0); });
    model_.copy_from(start);
  }

  int parent() const noexcept { return comm_.rank() == 0 ? -1 : (comm_.rank() - 1) / options_.fanout; }
  std::vector<int> children() const {
    std::vector<int> kids;
    for (int c = comm_.rank() * options_.fanout + 1; c <= comm_.rank() * options_.fanout + options_.fanout; ++c)
      if (c < comm_.size()) kids.push_back(c);
    return kids;
  }

  void end_step() {
    comm_.require_merged("tree_easgd step");
    this->count_step();
    const std::uint64_t step = this->stats_.steps;
    if (step % options_.tau_up == 0) {
      for (int child : children()) answer(child, up_tag);
      if (parent() >= 0) ask(parent(), up_tag);
    }
    if (step % options_.tau_down == 0) {
      if (parent() >= 0) answer(parent(), down_tag);
      for (int child : children()) ask(child, down_tag);
    }
  }

  // Collective: every rank's model becomes the root's.
  void finish() {
    std::vector<float> root = model_.snapshot();
    this->metered(comm_, "tree_easgd finish", [&] { broadcast(comm_, std::span<float>(root), 0); });
    model_.copy_from(root);
  }

 private:
  static constexpr int up_tag = 1;    // a child asks its parent
  static constexpr int down_tag = 2;  // a parent asks its child
  static constexpr int answer_tag = 3;

  wire::reader reader_for(int peer, const char* operation) const {
    return {comm_.world_rank(comm_.rank()), comm_.world_rank(peer), operation};
  }

  // Sends this node's model to `peer`, takes d back, subtracts it.
  void ask(int peer, int tag) {
    model_.copy_to(asked_.payload_as<float>());
    const auto sent =
        asked_.write(wire::kind::pull, ++exchanges_with(peer), static_cast<double>(this->stats_.steps), bytes_);
    this->metered(comm_, "tree_easgd ask", [&] {
      std::array<request, 2> round_trip{comm_.irecv(answer_.buffer(), peer, answer_tag), comm_.isend(sent, peer, tag)};
      comm_.wait_all(round_trip, "tree_easgd exchange");
      const wire::reader from = reader_for(peer, "tree_easgd exchange");
      wire::expect_sequence(answer_.read(round_trip[0].received_bytes(), {wire::kind::reply}, bytes_, from),
                            exchanges_with(peer), from);
    });
    model_.for_each_part(std::span<const float>(answer_.payload_as<float>()),
                         [](std::span<float> tensor, std::span<const float> d) {
                           for (std::size_t k = 0; k < tensor.size(); ++k) tensor[k] -= d[k];
                         });
    ++this->stats_.exchanges;
  }

  // Waits for `peer`'s model, moves this node toward it, answers with d.
  void answer(int peer, int tag) {
    const wire::reader from = reader_for(peer, "tree_easgd answer");
    this->metered(comm_, "tree_easgd answer", [&] {
      request arrival = comm_.irecv(incoming_.buffer(), peer, tag);
      comm_.wait(arrival, "tree_easgd answer, waiting for the neighbour's model");
      wire::expect_sequence(incoming_.read(arrival.received_bytes(), {wire::kind::pull}, bytes_, from),
                            ++exchanges_with(peer), from);
      const std::span<float> d = reply_.payload_as<float>();
      model_.for_each_part(std::span<float>(d), [&](std::span<float> tensor, std::span<float> part) {
        const std::size_t offset = static_cast<std::size_t>(part.data() - d.data());
        elastic_answer(std::span<const float>(incoming_.payload_as<float>()).subspan(offset, tensor.size()), tensor,
                       part, static_cast<float>(options_.alpha));
      });
      comm_.send(reply_.write(wire::kind::reply, exchanges_with(peer), 0.0, bytes_), peer, answer_tag);
    });
    ++this->stats_.merges;
  }

  // Exchanges with each neighbour, either side asking, numbered from 1.
  std::uint64_t& exchanges_with(int peer) {
    if (sequence_.empty()) sequence_.assign(static_cast<std::size_t>(comm_.size()), 0);
    return sequence_[static_cast<std::size_t>(peer)];
  }

  Communicator comm_;
  parameters model_;
  tree_easgd_options options_;
  std::size_t bytes_;
  wire::message asked_, answer_, incoming_, reply_;
  std::vector<std::uint64_t> sequence_;
};

template <class C>
tree_easgd(C&, parameters, tree_easgd_options = {}) -> tree_easgd<C>;

}  // namespace chorus::averaging
