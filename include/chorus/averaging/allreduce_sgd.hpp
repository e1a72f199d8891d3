// allreduce-SGD: the baseline. Every step the gradients are averaged over
// all ranks (through fusion buckets, or compressed by a codec) before the
// trainer's optimiser applies them, so every replica takes the same step and
// the models stay bit-identical.
//
// With a codec the gradients travel compressed, through error feedback by
// default (one residual per scheme, for the whole flattened gradient): what
// a lossy or sparse codec drops (top-k keeps 1%) is added to the next
// step's gradient instead of being lost.
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

namespace chorus::averaging {

struct allreduce_sgd_options {
  codec::any_codec codec{};      // none: full-precision gradients
  std::size_t bucket_bytes = 0;  // fusion bucket; 0: CHORUS_FUSION_BUCKET or 25 MiB
  bool error_feedback = true;    // with a codec: keep what it drops for the next step
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
  }

  void reduce_gradients() {
    this->metered([&] {
      if (feedback_)
        average_models(comm_, gradients_, feedback_);
      else
        average_models(comm_, gradients_, options_.codec, options_.bucket_bytes);
    });
    ++this->stats_.exchanges;
  }
  void end_step() { this->count_step(); }

 private:
  Communicator& comm_;
  parameters model_;
  parameters gradients_;
  allreduce_sgd_options options_;
  codec::any_error_feedback feedback_;
};

}  // namespace chorus::averaging
