// allreduce-SGD: the baseline. Every step the gradients are averaged over
// all ranks (through fusion buckets, or compressed by a codec) before the
// trainer's optimiser applies them, so every replica takes the same step and
// the models stay bit-identical.
//
// With a codec the gradients travel compressed, through error feedback by
// default (one residual per scheme, for the whole flattened gradient): what
// a lossy or sparse codec drops (top-k keeps 1%) is added to the next
// step's gradient instead of being lost. With low_rank_shapes the
// gradients travel as PowerSGD's rank-r factors (compressed/powersgd.hpp),
// also with error feedback: two allreduces of (rows + cols) r floats per
// matrix instead of one of rows cols.
//
// Cost per step: one allreduce of the gradients, 2(n-1) alpha + 2 (n-1)/n S
// beta per bucket with the ring (the allreduce picks its algorithm by size).
// Chosen when the network keeps up with the computation; the schemes beside
// it trade exactness for fewer or cheaper exchanges.
#pragma once

#include <chorus/averaging/consensus.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/codec/any_error_feedback.hpp>
#include <chorus/compressed/powersgd.hpp>

#include <optional>
#include <vector>

namespace chorus::averaging {

struct allreduce_sgd_options {
  codec::any_codec codec{};      // none: full-precision gradients
  std::size_t bucket_bytes = 0;  // fusion bucket; 0: CHORUS_FUSION_BUCKET or 25 MiB
  bool error_feedback = true;    // with a codec: keep what it drops for the next step
  // PowerSGD instead of a codec: each gradient tensor's shape as a matrix
  // (empty: no PowerSGD), and its rank, seed and error feedback.
  std::vector<matrix_shape> low_rank_shapes{};
  powersgd_options low_rank{};
};

template <class Communicator>
class allreduce_sgd : public scheme_base<allreduce_sgd<Communicator>> {
 public:
  allreduce_sgd(Communicator& comm, parameters model, parameters gradients, allreduce_sgd_options options = {})
      : comm_(comm),
        model_(std::move(model)),
        gradients_(std::move(gradients)),
        options_(std::move(options)),
        feedback_(options_.error_feedback ? options_.codec : codec::any_codec{}) {
    model_.require_same_shape(gradients_, "allreduce_sgd gradients");
    if (!options_.error_feedback) codec::require_model_codec(options_.codec, "allreduce_sgd without error feedback");
    if (!options_.low_rank_shapes.empty()) {
      if (options_.codec)
        throw error(errc::invalid_argument, "allreduce_sgd: a codec or PowerSGD (low_rank_shapes), not both",
                    {-1, -1, "allreduce_sgd"});
      low_rank_.emplace(options_.low_rank_shapes, options_.low_rank);
    }
  }

  void reduce_gradients() {
    this->metered(comm_, "allreduce_sgd reduce_gradients", [&] {
      if (low_rank_)
        average_low_rank();
      else if (feedback_)
        average_models(comm_, gradients_, feedback_);
      else
        average_models(comm_, gradients_, options_.codec, options_.bucket_bytes);
    });
    ++this->stats_.exchanges;
  }
  void end_step() { this->count_step(); }

 private:
  // PowerSGD works on host memory: the gradients go through one host copy
  // (they may be device tensors).
  void average_low_rank() {
    std::vector<float> flat = gradients_.snapshot();
    std::vector<std::span<float>> tensors;
    std::size_t offset = 0;
    for (const std::span<float>& tensor : gradients_.tensors()) {
      tensors.push_back(std::span<float>(flat).subspan(offset, tensor.size()));
      offset += tensor.size();
    }
    low_rank_->average(comm_, std::span<const std::span<float>>(tensors));
    gradients_.copy_from(flat);
  }

  Communicator& comm_;
  parameters model_;
  parameters gradients_;
  allreduce_sgd_options options_;
  codec::any_error_feedback feedback_;
  std::optional<powersgd> low_rank_;
};

}  // namespace chorus::averaging
