// allreduce-SGD: the baseline. Every step the gradients are averaged over
// all ranks (through fusion buckets, or compressed by a codec) before the
// trainer's optimiser applies them, so every replica takes the same step and
// the models stay bit-identical.
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

namespace chorus::averaging {

struct allreduce_sgd_options {
  codec::any_codec codec{};      // none: full-precision gradients
  std::size_t bucket_bytes = 0;  // fusion bucket; 0: CHORUS_FUSION_BUCKET or 25 MiB
};

template <class Communicator>
class allreduce_sgd : public scheme_base<allreduce_sgd<Communicator>> {
 public:
  allreduce_sgd(Communicator& comm, parameters model, parameters gradients, allreduce_sgd_options options = {})
      : comm_(comm), model_(std::move(model)), gradients_(std::move(gradients)), options_(std::move(options)) {
    model_.require_same_shape(gradients_, "allreduce_sgd gradients");
  }

  void reduce_gradients() {
    this->metered([&] { average_models(comm_, gradients_, options_.codec, options_.bucket_bytes); });
    ++this->stats_.exchanges;
  }
  void end_step() { this->count_step(); }

 private:
  Communicator& comm_;
  parameters model_;
  parameters gradients_;
  allreduce_sgd_options options_;
};

}  // namespace chorus::averaging
