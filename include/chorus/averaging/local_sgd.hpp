// Local SGD (periodic model averaging): each rank takes H local steps on its
// own data, then all models are averaged exactly. H = 1 with plain SGD is
// allreduce-SGD (the same arithmetic up to float rounding). Post-local SGD
// (Lin et al. 2020) averages every step for the first `warmup_steps`, while
// the loss falls fastest, and every H steps after.
//
// Cost: one allreduce of the model per averaging, 2(n-1) alpha + 2 (n-1)/n S
// beta with the ring, so 1/H of allreduce-SGD's traffic per step. Chosen
// when the network, not the computation, bounds the step time.
#pragma once

#include <chorus/averaging/consensus.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/core/error.hpp>

#include <cstdint>
#include <string>

namespace chorus::averaging {

struct local_sgd_options {
  std::uint64_t period = 8;        // H: local steps between averagings
  std::uint64_t warmup_steps = 0;  // average every step for this many steps first
  codec::any_codec codec{};        // none: full-precision models
  std::size_t bucket_bytes = 0;    // fusion bucket; 0: CHORUS_FUSION_BUCKET or 25 MiB
};

template <class Communicator>
class local_sgd : public scheme_base<local_sgd<Communicator>> {
 public:
  local_sgd(Communicator& comm, parameters model, local_sgd_options options = {})
      : comm_(comm), model_(std::move(model)), options_(std::move(options)) {
    if (options_.period == 0) throw error(errc::invalid_argument, "local_sgd: the period H must be at least 1");
    codec::require_model_codec(options_.codec, "local_sgd");
  }

  void end_step() {
    this->count_step();
    const std::uint64_t step = this->stats_.steps;
    if (step <= options_.warmup_steps || step % options_.period == 0) average();
  }

  // Averages once more unless the last step just did: every rank ends with
  // the same, averaged model.
  void finish() {
    if (averaged_at_ != this->stats_.steps) average();
  }

 private:
  void average() {
    this->metered(comm_, "local_sgd average",
                  [&] { average_models(comm_, model_, options_.codec, options_.bucket_bytes); });
    ++this->stats_.exchanges;
    averaged_at_ = this->stats_.steps;
  }

  Communicator& comm_;
  parameters model_;
  local_sgd_options options_;
  std::uint64_t averaged_at_ = 0;
};

}  // namespace chorus::averaging
