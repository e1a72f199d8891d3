// Whole-group model operations the schemes share (all collective):
//
//   average_models(comm, model)           every rank's parameters become the
//                                         exact average (one fused allreduce,
//                                         or a compressed one through a codec)
//   weighted_consensus(comm, model, w)    every rank's parameters become
//                                         sum w x / sum w (gossip's finish)
//   consensus_distance(comm, model)       sqrt((1/(n d)) sum_i ||x_i - mean||^2)
//                                         for d parameters: the RMS distance of
//                                         one coordinate from the mean, so it
//                                         does not grow with the model's size;
//                                         the same value on every rank
//
// Cost of average_models: one allreduce of the model (ring: 2(n-1) alpha +
// 2 (n-1)/n S beta), with S the model's bytes after the codec.
#pragma once

#include <chorus/averaging/parameters.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/codec/any_error_feedback.hpp>
#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/collective/fusion.hpp>
#include <chorus/compressed/compressed_allreduce.hpp>

#include <cmath>
#include <span>
#include <vector>

namespace chorus::averaging {

// Averages `model` over the group in place; with a codec the model travels
// compressed (the average is then exact up to the codec's error, and still
// identical on every rank).
template <class Communicator>
void average_models(Communicator& comm, const parameters& model, const codec::any_codec& wire = {},
                    std::size_t bucket_bytes = 0) {
  if (!wire) {
    fused_allreduce(comm, model.tensors(), op::avg{}, bucket_bytes);
    return;
  }
  std::vector<float> flat = model.snapshot();
  codec::visit(wire, [&](auto coder) { allreduce(comm, std::span<float>(flat), op::avg{}, coder); });
  model.copy_from(flat);
}

// The same through error feedback around the codec (the residual carried
// to the next call; one object per model).
template <class Communicator>
void average_models(Communicator& comm, const parameters& model, codec::any_error_feedback& feedback) {
  std::vector<float> flat = model.snapshot();
  feedback.visit([&](auto& f) { allreduce(comm, std::span<float>(flat), op::avg{}, f); });
  model.copy_from(flat);
}

// Every rank's model becomes the weighted consensus sum_i w_i x_i / sum_i w_i
// over the group, in double (the gossip schemes' finish(): each rank's
// weight is its share). Cost: one allreduce of the model and one double.
template <class Communicator>
void weighted_consensus(Communicator& comm, const parameters& model, double weight) {
  std::vector<float> x = model.snapshot();  // the model may be device memory
  std::vector<double> weighted(x.size() + 1);
  for (std::size_t k = 0; k < x.size(); ++k) weighted[k] = weight * static_cast<double>(x[k]);
  weighted.back() = weight;
  allreduce(comm, std::span<double>(weighted), op::sum{});
  for (std::size_t k = 0; k < x.size(); ++k) x[k] = static_cast<float>(weighted[k] / weighted.back());
  model.copy_from(x);
}

template <class Communicator>
double consensus_distance(Communicator& comm, const parameters& model) {
  std::vector<float> mean = model.snapshot();
  allreduce(comm, std::span<float>(mean), op::avg{});
  double squared = 0.0;
  model.for_each_part(std::span<const float>(mean), [&](std::span<const float> tensor, std::span<const float> average) {
    for (std::size_t k = 0; k < tensor.size(); ++k) {
      const double gap = static_cast<double>(tensor[k]) - static_cast<double>(average[k]);
      squared += gap * gap;
    }
  });
  allreduce(comm, std::span<double>(&squared, 1), op::avg{});
  return model.size() == 0 ? 0.0 : std::sqrt(squared / static_cast<double>(model.size()));
}

}  // namespace chorus::averaging
