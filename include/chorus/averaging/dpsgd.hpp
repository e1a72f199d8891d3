// D-PSGD (Lian et al. 2017): decentralised SGD over a topology. Each rank
// mixes its model with its neighbours' and takes its own gradient step:
//   x_i <- sum_j W_ij x_j - eta grad_i(x_i)
// with the gradient taken at the pre-mixing point, so the exchange overlaps
// the computation: begin_step() snapshots x_i and sends it, the trainer
// computes and applies its step, end_step() waits and adds
//   sum_{j != i} W_ij (x_j - x_i)   (x at the snapshot, as the wire carries it)
// to the updated parameters. Mixing against the decoded own model keeps the
// average of the models exact even with a lossy codec, for W doubly stochastic.
//
// Cost per step: degree alpha + degree * S beta (ring: 2 messages of the
// encoded model, one-peer exponential: 1) instead of an allreduce; no global
// synchronisation, so a slow rank delays only its neighbours. Chosen for
// many ranks or slow links; finish() averages exactly once for evaluation.
//
// A model in device memory on an NCCL communicator, or on a chorus
// communicator whose UCX moves CUDA memory (the direct path), with a
// cuda::router given the device kernels, mixes on the device and its
// rounds carry device buffers (device_mixing.hpp); elsewhere the round is
// neighbour_exchange's, on host snapshots, or with one_sided
// window_exchange's (always: a window's slots are host memory): puts into
// the neighbours' window slots, the same arithmetic bit for bit.
#pragma once

#include <chorus/averaging/consensus.hpp>
#include <chorus/averaging/device_mixing.hpp>
#include <chorus/averaging/neighbour_exchange.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/averaging/topology.hpp>
#include <chorus/averaging/window_exchange.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/core/error.hpp>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

namespace chorus::averaging {

struct dpsgd_options {
  std::optional<averaging::topology> topology{};  // default: ring over the communicator
  codec::any_codec codec{};                       // none: full-precision models
  bool one_sided = false;                         // rounds through a tensor window (window_exchange.hpp)
};

template <class Communicator>
class dpsgd : public scheme_base<dpsgd<Communicator>> {
 public:
  dpsgd(Communicator& comm, parameters model, dpsgd_options options = {})
      : comm_(comm.split(0, comm.rank())),
        model_(std::move(model)),
        topology_(options.topology.value_or(averaging::topology::ring(comm.size()))),
        exchange_(exchange_for(options, comm_, topology_, model_.size())) {
    if (topology_.size() != comm.size())
      throw error(errc::invalid_argument, "dpsgd: topology " + topology_.name() + " has " +
                                              std::to_string(topology_.size()) + " ranks, the communicator " +
                                              std::to_string(comm.size()));
    topology_.require(stochastic::doubly);
    const bool one_sided = std::holds_alternative<window_exchange<Communicator>>(*exchange_);
    if (memory_router* router = one_sided ? nullptr : device_mixing<Communicator>::router_for(comm_, model_))
      on_device_.emplace(comm_, model_, wire(), *router);
  }

  const averaging::topology& topology() const noexcept { return topology_; }

  void begin_step() {
    comm_.require_merged("dpsgd step");
    if (on_device_) return this->metered(comm_, "dpsgd begin_step", [&] { on_device_->start(topology_.at(round_)); });
    snapshot_.resize(model_.size());
    model_.copy_to(snapshot_);
    with_exchange([&](auto& exchange) {
      this->metered(comm_, "dpsgd begin_step", [&] { exchange.start(topology_.at(round_), snapshot_); });
      if (exchange.wire()) exchange.decoded_self(snapshot_);
    });
  }

  void end_step() {
    this->metered(comm_, "dpsgd end_step", [&] {
      if (on_device_) return on_device_->finish();
      with_exchange([&](auto& exchange) {
        exchange.finish([&](int, double weight, std::span<const float> neighbour) {
          mix_in(static_cast<float>(weight), neighbour);
        });
      });
    });
    ++round_;
    ++this->stats_.exchanges;
    this->count_step();
  }

  // Exact average for evaluation; every rank ends with the same model.
  void finish() {
    this->metered(comm_, "dpsgd finish", [&] { average_models(comm_, model_); });
  }

 private:
  using exchanges = std::variant<std::monostate, neighbour_exchange<Communicator>, window_exchange<Communicator>>;

  // The round's mechanism is made in place: neither kind moves.
  static std::unique_ptr<exchanges> exchange_for(dpsgd_options& options, Communicator& comm,
                                                 const averaging::topology& graph, std::size_t elements) {
    auto made = std::make_unique<exchanges>();
    if (options.one_sided)
      made->template emplace<window_exchange<Communicator>>(comm, graph, elements, std::move(options.codec));
    else
      made->template emplace<neighbour_exchange<Communicator>>(comm, elements, std::move(options.codec));
    return made;
  }
  template <class F>
  void with_exchange(F&& f) {
    if (auto* two_sided = std::get_if<neighbour_exchange<Communicator>>(exchange_.get())) return f(*two_sided);
    f(std::get<window_exchange<Communicator>>(*exchange_));
  }
  const codec::any_codec& wire() {
    const codec::any_codec* held = nullptr;
    with_exchange([&](auto& exchange) { held = &exchange.wire(); });
    return *held;
  }

  // x += w (neighbour - snapshot), tensor by tensor.
  void mix_in(float weight, std::span<const float> neighbour) {
    model_.for_each_part(neighbour, [&](std::span<float> tensor, std::span<const float> theirs) {
      const float* mine = snapshot_.data() + (theirs.data() - neighbour.data());
      float* out = tensor.data();
      for (std::size_t k = 0; k < tensor.size(); ++k) out[k] += weight * (theirs[k] - mine[k]);
    });
  }

  Communicator comm_;  // its own: the exchange's tags meet no one else's
  parameters model_;
  averaging::topology topology_;
  std::unique_ptr<exchanges> exchange_;
  std::optional<device_mixing<Communicator>> on_device_;  // device models on NCCL
  std::vector<float> snapshot_;
  std::size_t round_ = 0;
};

}  // namespace chorus::averaging
