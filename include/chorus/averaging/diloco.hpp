// DiLoCo (Douillard et al. 2023) and Streaming DiLoCo (Douillard et al.
// 2025). Every worker takes H inner steps from the global model theta with
// its own optimizer (the trainer's, AdamW in the papers); then the outer
// gradient, theta minus the workers' mean model, is averaged and an outer
// optimizer (Nesterov SGD, rate 0.7, momentum 0.9) steps theta, which every
// worker continues from. Streaming: the model in P fragments (strided over
// the tensors: t % P), fragment f synced at the steps where step mod H is
// f H / P; its allreduce overlaps tau inner steps on the background thread,
// and the new global fragment is merged into what the worker has by then
// as alpha local + (1 - alpha) global.
//
//   chorus::averaging::diloco scheme(comm, model, {.period = 100, .codec = chorus::codec::fp4_e2m1{}});
//   for (each batch) { inner_step(); scheme.end_step(); }
//   scheme.finish();  // every rank holds the global model
//
// Cost: per H steps one allreduce of the model (2(n-1) alpha + 2 (n-1)/n S
// beta with the ring, S after the codec): 1/H of allreduce-SGD's traffic,
// and with P fragments a peak P times lower, hidden behind compute while
// tau inner steps take longer than one fragment's allreduce. Chosen across
// slow links, where allreduce-SGD waits on the network every step.
//
// Exactness: theta, the outer optimizer's state and the averages are the
// same bits on every rank, so every rank ends each round with the same
// global model. Without a codec the models are averaged (the outer
// gradient is theta minus that average); with one, each worker's outer
// gradient goes through the codec with error feedback (what one round loses
// is sent in the next), as low-bit DiLoCo does. Outer SGD with rate 1 and no
// momentum takes the average as it is: local SGD, bit for bit.
#pragma once

#include <chorus/averaging/local_optimizer.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/codec/any_error_feedback.hpp>
#include <chorus/collective/broadcast.hpp>
#include <chorus/collective/nonblocking.hpp>
#include <chorus/compressed/allreduce.hpp>
#include <chorus/core/error.hpp>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace chorus::averaging {

struct outer_sgd {
  double learning_rate = 0.7;
  double momentum = 0.9;
  bool nesterov = true;
};

// An outer optimizer of the caller's: steps `global` (fragment `fragment`'s
// part of theta) by the averaged outer gradient, in place. It must give the
// same bits on every rank for the same arguments.
using outer_optimizer =
    std::function<void(std::size_t fragment, std::span<float> global, std::span<const float> outer_gradient)>;

struct diloco_options {
  std::uint64_t period = 500;              // H: inner steps between a fragment's syncs
  outer_sgd outer{};                       // the built-in outer optimizer
  outer_optimizer custom_outer{};          // replaces it where set
  codec::any_codec codec{};                // the outer gradients' codec, with error feedback; none: fp32 models
  std::size_t fragments = 1;               // P (Streaming DiLoCo); 1: plain DiLoCo
  std::vector<std::size_t> fragment_of{};  // tensor t's fragment; empty: t % P
  std::uint64_t overlap_steps = 0;         // tau: inner steps a fragment's allreduce overlaps (< H)
  double mixing = 0.0;                     // alpha: the local share when a fragment merges
};

template <class Communicator>
class diloco : public scheme_base<diloco<Communicator>> {
 public:
  // Collective: every rank starts from rank 0's parameters (written into
  // the model), which are the first global model.
  diloco(Communicator& comm, parameters model, diloco_options options = {})
      : comm_(comm), model_(std::move(model)), options_(std::move(options)) {
    check_options();
    std::vector<float> start = model_.snapshot();
    broadcast(comm_, std::span<float>(start), 0);
    model_.copy_from(start);
    make_fragments(start);
  }

  diloco(const diloco&) = delete;  // the background syncs hold its fragments' addresses
  diloco& operator=(const diloco&) = delete;
  // A sync still in flight (an exception unwound past finish()) is waited
  // for, bounded by the communicator's timeout, before its buffers go.
  ~diloco() {
    for (fragment_state& f : fragments_)
      if (f.pending) try {
          f.request.wait();
        } catch (const error&) {}
  }

  void end_step() {
    this->count_step();
    const std::uint64_t step = this->stats_.steps;
    for (fragment_state& f : fragments_)
      if (f.pending && step == f.merge_at) complete(f);
    for (fragment_state& f : fragments_)
      if (step % options_.period == f.offset) start(f, options_.overlap_steps);
  }

  // Collective: pending syncs complete, then every fragment not synced at
  // this step syncs once more; the parameters become the global model.
  void finish() {
    for (fragment_state& f : fragments_)
      if (f.pending) complete(f);
    for (fragment_state& f : fragments_) {
      if (f.synced_at != this->stats_.steps) start(f, 0);
      f.model.copy_from(f.global);
    }
  }

  // Fragment f's part of theta, the last global model (host memory).
  std::span<const float> global_model(std::size_t fragment = 0) const { return fragments_.at(fragment).global; }
  std::size_t fragments() const noexcept { return fragments_.size(); }

 private:
  struct fragment_state {
    parameters model;                     // this fragment's tensors
    std::uint64_t offset = 0;             // synced at steps with step mod H == offset
    std::vector<float> global, velocity;  // theta and the outer momentum, this fragment's part
    std::vector<float> sent;              // the models (no codec) or outer gradients, averaged in place
    std::optional<codec::any_error_feedback> feedback;
    collective_request request;
    bool pending = false;
    std::uint64_t merge_at = 0, synced_at = 0;
    std::uint64_t bytes_in_background = 0, messages_in_background = 0;
  };

  void check_options() {
    const auto invalid = [](const std::string& what) { return error(errc::invalid_argument, "diloco: " + what); };
    const std::size_t tensors = model_.tensors().size();
    if (options_.period == 0) throw invalid("the period H must be at least 1");
    if (options_.fragments == 0 || options_.fragments > tensors)
      throw invalid(std::to_string(options_.fragments) + " fragments of " + std::to_string(tensors) +
                    " tensors (each fragment needs a tensor)");
    if (options_.overlap_steps >= options_.period)
      throw invalid("overlap_steps (tau = " + std::to_string(options_.overlap_steps) +
                    ") must be below the period (H = " + std::to_string(options_.period) +
                    "): a fragment merges before its next sync");
    if (!(options_.mixing >= 0.0 && options_.mixing <= 1.0)) throw invalid("mixing (alpha) must be in [0, 1]");
    if (!options_.fragment_of.empty() && options_.fragment_of.size() != tensors)
      throw invalid("fragment_of names " + std::to_string(options_.fragment_of.size()) + " tensors of " +
                    std::to_string(tensors));
    for (std::size_t f : options_.fragment_of)
      if (f >= options_.fragments)
        throw invalid("fragment_of names fragment " + std::to_string(f) + " of " + std::to_string(options_.fragments));
  }

  void make_fragments(std::span<const float> start) {
    const std::size_t count = options_.fragments;
    std::vector<std::vector<std::span<float>>> tensors(count);
    std::vector<std::vector<float>> globals(count);
    std::size_t offset = 0;
    for (std::size_t t = 0; t < model_.tensors().size(); ++t) {
      const std::span<float> tensor = model_.tensors()[t];
      const std::size_t f = options_.fragment_of.empty() ? t % count : options_.fragment_of[t];
      tensors[f].push_back(tensor);
      globals[f].insert(globals[f].end(), start.begin() + static_cast<std::ptrdiff_t>(offset),
                        start.begin() + static_cast<std::ptrdiff_t>(offset + tensor.size()));
      offset += tensor.size();
    }
    fragments_.resize(count);
    for (std::size_t f = 0; f < count; ++f) {
      if (tensors[f].empty())
        throw error(errc::invalid_argument, "diloco: fragment " + std::to_string(f) + " has no tensor");
      fragment_state& state = fragments_[f];
      state.model = parameters(std::move(tensors[f]));
      state.offset = f * options_.period / count;
      state.global = std::move(globals[f]);
      if (options_.outer.momentum != 0.0) state.velocity.assign(state.global.size(), 0.0f);
      if (options_.codec) state.feedback.emplace(options_.codec);
    }
  }

  // The fragment's models (no codec) or outer gradients, averaged now or,
  // with `overlap` steps, on the background thread until step + overlap.
  void start(fragment_state& f, std::uint64_t overlap) {
    f.sent = f.model.snapshot();
    if (options_.codec)
      for (std::size_t k = 0; k < f.sent.size(); ++k) f.sent[k] = f.global[k] - f.sent[k];
    f.synced_at = this->stats_.steps;
    ++this->stats_.exchanges;
    if (overlap == 0) {
      this->metered(comm_, "diloco sync", [&] { average(comm_, f); });
      return apply_outer(f);
    }
    f.request = collective::start(comm_, record::collective("diloco sync", std::span<const float>(f.sent), "avg"),
                                  [this, &f](Communicator& forked) {
                                    const traffic before = this_thread_traffic();
                                    average(forked, f);
                                    const traffic sent = this_thread_traffic() - before;
                                    f.bytes_in_background = sent.bytes_sent;
                                    f.messages_in_background = sent.messages_sent;
                                  });
    f.pending = true;
    f.merge_at = this->stats_.steps + overlap;
  }

  static void average(Communicator& comm, fragment_state& f) {
    const std::span<float> data(f.sent);
    if (f.feedback)
      f.feedback->visit([&](auto& feedback) { allreduce(comm, data, op::avg{}, feedback); });
    else
      allreduce(comm, data, op::avg{});
  }

  // The background sync is done: theta steps, and the worker merges.
  void complete(fragment_state& f) {
    f.request.wait();
    f.pending = false;
    this->stats_.bytes_sent += f.bytes_in_background;
    this->stats_.messages_sent += f.messages_in_background;
    apply_outer(f);
  }

  // theta steps by the outer gradient (theta - mean model, or the averaged
  // outer gradients), then the worker's fragment becomes alpha local +
  // (1 - alpha) theta.
  void apply_outer(fragment_state& f) {
    const outer_sgd& outer = options_.outer;
    if (!options_.codec && !options_.custom_outer && outer.learning_rate == 1.0 && outer.momentum == 0.0) {
      f.global = f.sent;  // theta - (theta - mean): the mean itself, as local SGD has it
    } else {
      if (!options_.codec)
        for (std::size_t k = 0; k < f.sent.size(); ++k) f.sent[k] = f.global[k] - f.sent[k];
      if (options_.custom_outer)
        options_.custom_outer(static_cast<std::size_t>(&f - fragments_.data()), f.global, f.sent);
      else
        sgd_step(f.global, f.sent, f.velocity, {outer.learning_rate, outer.momentum, outer.nesterov, 0.0});
    }
    merge(f);
  }

  void merge(fragment_state& f) {
    if (options_.mixing == 0.0) return f.model.copy_from(f.global);
    std::vector<float> local = f.model.snapshot();
    const auto alpha = static_cast<float>(options_.mixing);
    for (std::size_t k = 0; k < local.size(); ++k) local[k] = alpha * local[k] + (1.0f - alpha) * f.global[k];
    f.model.copy_from(local);
  }

  Communicator& comm_;
  parameters model_;
  diloco_options options_;
  std::vector<fragment_state> fragments_;
};

}  // namespace chorus::averaging
