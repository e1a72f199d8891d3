// Synchronous EASGD (Zhang, Choromanska, LeCun 2015): each rank explores on
// its own, held to a centre variable c by an elastic force alpha = eta * rho.
// Every tau steps, with d_i = x_i - c at the pre-gradient point:
//   x_i <- x_i - eta g_i - alpha d_i,       c <- c + alpha sum_i d_i
// (moving rate beta = n alpha). The sum is one allreduce, whose result is
// the same bits on every rank, so every rank keeps an identical copy of c
// and no server is needed. EAMSGD is the same elastic step with a Nesterov
// local optimiser (local_optimizer.hpp). The model to keep is the centre:
// finish() writes it into the parameters.
//
// Cost: one allreduce of the model every tau steps, 2(n-1) alpha +
// 2 (n-1)/n S beta with the ring. Stable for n alpha < 1 (beta < 1).
#pragma once

#include <chorus/averaging/consensus.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/core/error.hpp>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace chorus::averaging {

struct easgd_options {
  double alpha = 0.05;       // elastic force eta * rho
  std::uint64_t tau = 1;     // local steps between elastic updates
  codec::any_codec codec{};  // on the allreduce of the differences
};

inline void require_elastic(double alpha, std::uint64_t tau, const char* scheme) {
  if (!(alpha > 0.0 && alpha < 1.0))
    throw error(errc::invalid_argument,
                std::string(scheme) + ": alpha must be in (0, 1), got " + std::to_string(alpha));
  if (tau == 0) throw error(errc::invalid_argument, std::string(scheme) + ": tau must be at least 1");
}

// One elastic exchange, on the side that answers: the asker sent its model
// x; d = alpha (x - mine); mine += d; the asker then subtracts d. Both move
// toward each other by the same d, so the sum of the two is unchanged
// (async EASGD: mine is the centre; TreeEASGD: a parent or a child).
inline void elastic_answer(std::span<const float> x, std::span<float> mine, std::span<float> d, float alpha) {
  for (std::size_t k = 0; k < mine.size(); ++k) {
    d[k] = alpha * (x[k] - mine[k]);
    mine[k] += d[k];
  }
}

template <class Communicator>
class easgd : public scheme_base<easgd<Communicator>> {
 public:
  // Collective: the centre starts at the average of the ranks' models.
  easgd(Communicator& comm, parameters model, easgd_options options = {})
      : comm_(comm), model_(std::move(model)), options_(std::move(options)) {
    require_elastic(options_.alpha, options_.tau, "easgd");
    codec::require_model_codec(options_.codec, "easgd");
    centre_ = model_.snapshot();
    this->metered(comm_, "easgd start", [&] { allreduce(comm_, std::span<float>(centre_), op::avg{}); });
  }

  std::span<const float> centre() const noexcept { return centre_; }

  // The elastic difference is taken at the pre-gradient point, as in the
  // paper's update, so it is snapshotted before the trainer's step.
  void begin_step() {
    if ((this->stats_.steps + 1) % options_.tau != 0) return;
    difference_.resize(centre_.size());
    model_.copy_to(difference_);
    for (std::size_t k = 0; k < difference_.size(); ++k) difference_[k] -= centre_[k];
  }

  void end_step() {
    this->count_step();
    if (this->stats_.steps % options_.tau == 0) elastic_step();
  }

  void finish() { model_.copy_from(centre_); }

 private:
  void elastic_step() {
    const auto alpha = static_cast<float>(options_.alpha);
    model_.for_each_part(std::span<const float>(difference_), [&](std::span<float> tensor, std::span<const float> d) {
      for (std::size_t k = 0; k < tensor.size(); ++k) tensor[k] -= alpha * d[k];
    });
    this->metered(comm_, "easgd elastic_step", [&] {
      if (options_.codec)
        codec::visit(options_.codec,
                     [&](auto coder) { allreduce(comm_, std::span<float>(difference_), op::sum{}, coder); });
      else
        allreduce(comm_, std::span<float>(difference_), op::sum{});
    });
    for (std::size_t k = 0; k < centre_.size(); ++k) centre_[k] += alpha * difference_[k];
    ++this->stats_.exchanges;
  }

  Communicator& comm_;
  parameters model_;
  easgd_options options_;
  std::vector<float> centre_;
  std::vector<float> difference_;
};

}  // namespace chorus::averaging
