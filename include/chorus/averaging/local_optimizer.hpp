// The local step the schemes expect the trainer to take, for trainers that
// have none of their own: SGD with optional momentum (heavy ball or
// Nesterov) and weight decay, over the same parameters view.
//
//   chorus::averaging::sgd optimiser(model, {.learning_rate = 0.05, .momentum = 0.9, .nesterov = true});
//   optimiser.apply(gradients);
//
// With Nesterov momentum and the easgd / easgd_async schemes this is EAMSGD
// (Zhang et al. 2015, Algorithm 2), written in the usual look-ahead form
// v <- mu v + g; x <- x - eta (g + mu v), so the gradient is taken at x.
#pragma once

#include <chorus/averaging/parameters.hpp>

#include <span>
#include <vector>

namespace chorus::averaging {

struct sgd_options {
  double learning_rate = 0.01;
  double momentum = 0.0;
  bool nesterov = false;
  double weight_decay = 0.0;
};

// One step on one tensor (or shard): x -= rate (g + decay x), through the
// momentum buffer `velocity` (ignored when momentum is 0). The trainer's
// optimiser and a parameter server's share it, so the same gradients give
// the same bits on either side.
inline void sgd_step(std::span<float> x, std::span<const float> g, std::span<float> velocity,
                     const sgd_options& options) {
  const auto rate = static_cast<float>(options.learning_rate);
  const auto mu = static_cast<float>(options.momentum);
  const auto decay = static_cast<float>(options.weight_decay);
  for (std::size_t k = 0; k < x.size(); ++k) {
    float step = g[k] + decay * x[k];
    if (mu != 0.0f) {
      float& v = velocity[k];
      v = mu * v + step;
      step = options.nesterov ? step + mu * v : v;
    }
    x[k] -= rate * step;
  }
}

class sgd {
 public:
  sgd(parameters model, sgd_options options) : model_(std::move(model)), options_(options) {
    if (options_.momentum != 0.0) velocity_.assign(model_.size(), 0.0f);
  }

  double learning_rate() const noexcept { return options_.learning_rate; }
  void set_learning_rate(double rate) noexcept { options_.learning_rate = rate; }

  void apply(const parameters& gradients) {
    model_.require_same_shape(gradients, "sgd gradients");
    model_.require_on_host("sgd");
    gradients.require_on_host("sgd");
    std::size_t offset = 0;
    for (std::size_t t = 0; t < model_.tensors().size(); ++t) {
      const std::span<float> x = model_.tensors()[t];
      const std::span<float> v =
          velocity_.empty() ? std::span<float>{} : std::span<float>(velocity_).subspan(offset, x.size());
      sgd_step(x, gradients.tensors()[t], v, options_);
      offset += x.size();
    }
  }

 private:
  parameters model_;
  sgd_options options_;
  std::vector<float> velocity_;
};

}  // namespace chorus::averaging
