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
// Rounds: a fragment syncs every H steps (period), every T seconds of this
// worker's compute (round_seconds: wall time less the time spent waiting on
// syncs), or whenever the job has processed about N samples
// (round_samples, as Hivemind's target batch: T = N / the job's samples per
// second, measured at every sync; the first round ends at N / n samples on
// every worker). Time and sample rounds let a fast worker take more steps
// than a slow one instead of waiting for it. Every sync first sums a small
// report (fp64): each worker's samples since the last sync (the job's
// progress, job_samples()), since this fragment's last sync (its weight:
// the models or outer gradients are averaged as sum w_i x_i / sum w_i, sent
// as n w_i / W x_i under op::avg, so equal weights send the bits
// themselves), its samples per second, and whether it is stopping. Workers
// stop in any order: finish() keeps syncing the fragments in their order,
// with no new samples, until a sync finds every worker stopping, then gives
// each other fragment one sync more, so every worker's last samples count.
// A sync runs on the background thread on every rank or on none (tau > 0
// or not), finish()'s too: the background thread's shared-memory channel
// is not the caller's.
//
// Workers that come and go (on_peer_failure = continue_; round_membership.hpp):
// a worker that dies is left out of the sync it died in and every one
// after: the survivors notice within the transport's watch interval, agree
// through the job's store on who is left and how far each got, hand the
// last sync's result from one that completed it to those that did not,
// and go on (the syncs that did not complete run again, over the
// survivors, their samples still counted). What a sync committed is the
// same on every survivor. A worker that leaves on purpose calls leave():
// it says so in its next sync's report, syncs each fragment once more
// (its last samples count), and is gone from the sync after those; it
// keeps the global model. Membership changes only at such a sync, before
// which every pending sync completes, so every member changes alike.
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
//
// Models in GPU memory: given a chorus::nccl::communicator, DiLoCo syncs on
// its chorus side (the syncs are rare and small beside the inner steps;
// theta and the outer momentum are host memory, as OpenDiLoCo keeps them),
// staging the device tensors through the parameters at each sync.
#pragma once

#include <chorus/averaging/admission.hpp>
#include <chorus/averaging/local_optimizer.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/peer_loss.hpp>
#include <chorus/averaging/round_membership.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/codec/any_error_feedback.hpp>
#include <chorus/collective/broadcast/broadcast.hpp>
#include <chorus/collective/nonblocking.hpp>
#include <chorus/compressed/compressed_allreduce.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
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
  double round_seconds = 0.0;              // > 0: T seconds of compute between a fragment's syncs instead
  std::uint64_t round_samples = 0;         // > 0: about N samples of the job's between them instead
  std::function<double()> clock{};         // seconds, monotonic; empty: steady_clock (tests pass their own)
  outer_sgd outer{};                       // the built-in outer optimizer
  outer_optimizer custom_outer{};          // replaces it where set
  codec::any_codec codec{};                // the outer gradients' codec, with error feedback; none: fp32 models
  std::size_t fragments = 1;               // P (Streaming DiLoCo); 1: plain DiLoCo
  std::vector<std::size_t> fragment_of{};  // tensor t's fragment; empty: t % P
  std::uint64_t overlap_steps = 0;         // tau: inner steps a fragment's allreduce overlaps (< H)
  double mixing = 0.0;                     // alpha: the local share when a fragment merges
  peer_failure_policy on_peer_failure = peer_failure_policy::raise;  // continue_: go on without the dead
};

template <class Communicator>
class diloco : public scheme_base<diloco<Communicator>> {
 public:
  // On an NCCL communicator: its host side (scheme.hpp, host_side). theta
  // and the outer momentum stay in host memory, as OpenDiLoCo keeps them; a
  // device model is staged through the parameters at each sync.
  template <class Other>
    requires(!std::same_as<Other, Communicator> && std::same_as<host_side_t<Other>, Communicator>)
  diloco(Other& comm, parameters model, diloco_options options = {})
      : diloco(host_side<Other>::of(comm), std::move(model), std::move(options)) {}

  // Collective: every rank starts from rank 0's parameters (written into
  // the model), which are the first global model. In a process that joined
  // the running job (CHORUS_JOIN): admitted by the group's rank 0, it
  // starts from the global model and the outer optimizer's state as they
  // are at the sync it enters.
  diloco(Communicator& comm, parameters model, diloco_options options = {})
      : group_(comm.joined() ? admission::enter(comm, "diloco") : comm.split(0, comm.rank())),
        model_(std::move(model)),
        options_(std::move(options)),
        losses_(options_.on_peer_failure) {
    check_options();
    if (!options_.clock)
      options_.clock = [] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
      };
    std::vector<float> start = model_.snapshot();
    if (!comm.joined()) broadcast(group_, std::span<float>(start), 0);
    make_fragments(start);
    if (comm.joined()) {
      join(comm);
    } else {
      model_.copy_from(start);
      if (losses_.tolerated())
        membership_.emplace(
            group_, [&](std::uint64_t& instance) { broadcast(group_, std::span<std::uint64_t>(&instance, 1), 0); });
      open_to_joiners();
    }
    started_at_ = options_.clock();
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

  // After an inner step that processed `samples` samples (the weight of
  // this worker's model in the next average; 1 a step unless told).
  void end_step(std::uint64_t samples = 1) {
    this->require_not_left("diloco end_step", group_.transport().rank());
    this->count_step();
    samples_ += samples;
    samples_since_any_ += samples;
    for (fragment_state& f : fragments_) f.samples += samples;
    take_introductions();
    surviving([&] {
      for (fragment_state* f = sync_numbered(completed_ + 1); f && f->pending && this->stats_.steps >= f->merge_at;
           f = sync_numbered(completed_ + 1))
        complete(*f);
      for (std::size_t synced = 0; synced < fragments_.size() && due(fragments_[next_]); ++synced)
        start(fragments_[next_], options_.overlap_steps);
    });
  }

  // Collective: pending syncs complete, then the fragments sync in their
  // order (this worker stopping, its samples since each fragment's last
  // sync as the weight) until one finds every worker stopping, and each
  // other fragment once more; the parameters become the global model.
  void finish() {
    this->require_not_left("diloco finish", group_.transport().rank());
    stopping_ = true;
    surviving([&] { settle(); });
    for (std::size_t more = fragments_.size(); more > 0;) {
      const bool recovered = surviving([&] {
        fragment_state& f = fragments_[next_];
        start(f, options_.overlap_steps);  // where the others run it: shared memory calls differ by thread
        settle();
        const bool all_stopping = f.report[stopping] == static_cast<double>(f.members);
        more = all_stopping ? std::min(more, fragments_.size()) - 1 : fragments_.size();
      });
      if (recovered) more = fragments_.size();
    }
    say_farewells();
    for (fragment_state& f : fragments_) f.model.copy_from(f.global);
  }

  // A worker that leaves while the others go on, between its steps: it
  // says so in its next sync, syncs every fragment once more, waits until
  // every other worker has let it go, and keeps the global model. From
  // then on every call but stats() is an error.
  void leave() {
    this->require_not_left("diloco leave", group_.transport().rank());
    leaving_ = stopping_ = true;
    while (!departed_) {
      surviving([&] {
        const std::optional<std::uint64_t> gone_at = departure_of(group_.transport().rank());
        if (gone_at && started_ + 1 >= *gone_at) {  // its last sync is done: the others let it go
          settle();
          say_farewells();
          departed_ = true;
          return;
        }
        fragment_state& f = fragments_[next_];
        start(f, options_.overlap_steps);
        settle();
      });
    }
    for (fragment_state& f : fragments_) f.model.copy_from(f.global);
    this->mark_left();
  }

  // Fragment f's part of theta, the last global model (host memory).
  std::span<const float> global_model(std::size_t fragment = 0) const { return fragments_.at(fragment).global; }
  std::size_t fragments() const noexcept { return fragments_.size(); }
  // The samples the whole job processed up to the last completed sync: the
  // same on every rank, so a learning-rate schedule driven by it is the
  // job's, however many workers run at whatever speed.
  std::uint64_t job_samples() const noexcept { return job_samples_; }
  // T: the compute seconds between a fragment's syncs (0 while rounds are
  // counted in steps, or in samples before the job's rate is known).
  double round_seconds() const noexcept { return round_seconds_; }
  // The syncs this worker completed (the same count on every survivor).
  std::uint64_t syncs() const noexcept { return completed_; }
  // The group the syncs run on now (without the workers that died or left).
  const Communicator& group() const noexcept { return group_; }
  // The workers this one went on without (on_peer_failure = continue_).
  std::vector<lost_peer> lost_peers() const { return losses_.list(); }

 private:
  // The report each sync sums first, fp64 (exact for counts below 2^53):
  // ..., a joiner rank 0 admits (its transport rank + 1), then each member's state (only it writes its entry): going on, leaving
  // or finishing.
  enum report_entry : std::size_t { samples_since_any, weight, samples_per_second, stopping, joiner, member_states };
  static constexpr double going_on = 0.0, leaving = 1.0, finishing = 2.0;

  struct fragment_state {
    parameters model;                     // this fragment's tensors
    double due = 0;                       // its next sync: at this step, compute time or local sample count
    double due_before = 0;                // the same before its last sync started (restored if it fails)
    bool timed = false;                   // due is a compute time
    std::uint64_t samples = 0;            // this worker's, since the fragment's last sync
    double synced_at_compute = 0;         // the compute clock then
    std::vector<float> global, velocity;  // theta and the outer momentum, this fragment's part
    std::vector<float> sent;              // the models (no codec) or outer gradients, averaged in place
    std::vector<double> report;           // this worker's, then the job's sums
    std::vector<double> own_report;       // this worker's (restored if the sync fails)
    int members = 0;                      // the group's size when it started
    std::uint64_t sequence = 0;           // its sync's number among all the syncs (1, 2, ...)
    bool in_sync = false;                 // started, not yet applied
    std::optional<codec::any_error_feedback> feedback;
    collective_request request;
    bool pending = false;
    std::uint64_t merge_at = 0;
    std::uint64_t bytes_in_background = 0, messages_in_background = 0;
    std::vector<typename Communicator::request> watch;  // round_membership::watch, while in sync
  };

  struct departure {
    int world_rank;
    std::uint64_t at;  // the first sync without it
  };

  bool by_steps() const noexcept { return options_.round_seconds <= 0.0 && options_.round_samples == 0; }

  void check_options() {
    const auto invalid = [](const std::string& what) { return error(errc::invalid_argument, "diloco: " + what); };
    const std::size_t tensors = model_.tensors().size();
    if (options_.period == 0) throw invalid("the period H must be at least 1");
    if (!(options_.round_seconds >= 0.0)) throw invalid("round_seconds must be at least 0");
    if (options_.round_seconds > 0.0 && options_.round_samples > 0)
      throw invalid("a round ends by round_seconds or by round_samples, not both");
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
    if (options_.on_peer_failure == peer_failure_policy::continue_ && group_.size() > 1 && group_.store() == nullptr)
      throw invalid("going on without dead workers needs the job's store (where the survivors agree)");
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
    round_seconds_ = options_.round_seconds;
    for (std::size_t f = 0; f < count; ++f) {
      if (tensors[f].empty())
        throw error(errc::invalid_argument, "diloco: fragment " + std::to_string(f) + " has no tensor");
      fragment_state& state = fragments_[f];
      state.model = parameters(std::move(tensors[f]));
      state.timed = round_seconds_ > 0.0;
      state.due = first_due(f);
      state.global = std::move(globals[f]);
      if (options_.outer.momentum != 0.0) state.velocity.assign(state.global.size(), 0.0f);
      if (options_.codec) state.feedback.emplace(options_.codec);
    }
    next_ = first_to_sync();
  }

  // Staggered: by steps fragment f first at step f H / P (those at 0 at H);
  // by time or samples at f/P of a round (fragment 0 at a whole one).
  double first_due(std::size_t f) const {
    const std::size_t count = options_.fragments;
    if (by_steps()) {
      const std::uint64_t offset = f * options_.period / count;
      return static_cast<double>(offset > 0 ? offset : options_.period);
    }
    const double first = static_cast<double>(f == 0 ? count : f) / static_cast<double>(count);
    return round_seconds_ > 0.0 ? first * round_seconds_ : first * samples_per_worker();
  }

  // The fragments sync in index order, round and round, from the first
  // fragment due: by steps the first with a positive offset (those with
  // none sync at step H, fragment 0 first); by time or samples fragment 1.
  std::size_t first_to_sync() const {
    for (std::size_t f = 1; f < fragments_.size(); ++f)
      if (!by_steps() || f * options_.period / fragments_.size() > 0) return f;
    return 0;
  }

  // Rounds by samples, before the job's rate is known: N / n each.
  double samples_per_worker() const {
    return static_cast<double>(options_.round_samples) / static_cast<double>(group_.size());
  }

  // Seconds since the scheme started, less those spent waiting on syncs.
  double compute_clock() const { return options_.clock() - started_at_ - waiting_; }

  bool due(const fragment_state& f) const {
    if (by_steps()) return static_cast<double>(this->stats_.steps) >= f.due;
    return f.timed ? compute_clock() >= f.due : static_cast<double>(samples_) >= f.due;
  }

  // Next round's step, time or (rounds by samples before the rate is
  // known) sample count, for the fragment syncing now.
  void schedule(fragment_state& f, double now) {
    f.due_before = f.due;
    if (by_steps()) {
      f.due += static_cast<double>(options_.period);
    } else if (round_seconds_ > 0.0) {
      f.due = (f.timed ? f.due : now) + round_seconds_;
      f.timed = true;
    } else {
      f.due = static_cast<double>(samples_) + samples_per_worker();
    }
  }

  template <class Work>
  void waiting(Work&& work) {
    const double before = options_.clock();
    std::forward<Work>(work)();
    waiting_ += options_.clock() - before;
  }

  // The fragment's models (no codec) or outer gradients, averaged now or,
  // with `overlap` steps, on the background thread until step + overlap.
  void start(fragment_state& f, std::uint64_t overlap) {
    while (f.pending) settle_next();  // rounds by time: a fragment due again before its merge step
    change_members(started_ + 1);
    f.sent = f.model.snapshot();
    if (options_.codec)
      for (std::size_t k = 0; k < f.sent.size(); ++k) f.sent[k] = f.global[k] - f.sent[k];
    const double now = by_steps() ? 0.0 : compute_clock();
    const double seconds = now - f.synced_at_compute;
    f.members = group_.size();
    f.report.assign(member_states + static_cast<std::size_t>(f.members), 0.0);
    f.report[samples_since_any] = static_cast<double>(samples_since_any_);
    f.report[weight] = static_cast<double>(f.samples);
    f.report[samples_per_second] = seconds > 0.0 ? static_cast<double>(f.samples) / seconds : 0.0;
    f.report[stopping] = stopping_ ? 1.0 : 0.0;
    if (!introduced_.empty()) f.report[joiner] = static_cast<double>(introduced_.front()) + 1.0;
    f.report[member_states + static_cast<std::size_t>(group_.rank())] = leaving_    ? leaving
                                                                        : stopping_ ? finishing
                                                                                    : going_on;
    f.own_report = f.report;
    samples_since_any_ = 0;
    f.samples = 0;
    f.synced_at_compute = now;
    schedule(f, now);
    f.sequence = ++started_;
    f.in_sync = true;
    next_ = static_cast<std::size_t>(&f - fragments_.data() + 1) % fragments_.size();
    ++this->stats_.exchanges;
    if (membership_) f.watch = membership_->watch(group_);
    if (overlap == 0) {
      waiting([&] { this->metered(group_, "diloco sync", [&] { exchange(group_, f); }); });
      return apply_outer(f);
    }
    f.request = collective::start(
        group_, record::collective("diloco sync", std::span<const float>(f.sent), "avg"),
        [this, &f](Communicator& forked) {
          // A sync after one that failed here does not start: syncs complete
          // in order on every member (round_membership.hpp).
          if (broken_.load(std::memory_order_acquire))
            throw error(errc::peer_failure, "diloco: an earlier sync failed", {forked.transport().rank(), -1, "sync"});
          try {
            const traffic before = this_thread_traffic();
            exchange(forked, f);
            const traffic sent = this_thread_traffic() - before;
            f.bytes_in_background = sent.bytes_sent;
            f.messages_in_background = sent.messages_sent;
          } catch (...) {
            broken_.store(true, std::memory_order_release);
            throw;
          }
        },
        true, 2);
    f.pending = true;
    f.merge_at = this->stats_.steps + overlap;
  }

  // The report summed, then sum_i w_i x_i / W as the average of
  // (n w_i / W) x_i. A worker with no samples sends zeros, through the codec
  // but not its error feedback (its residual waits for a round it counts in).
  void exchange(Communicator& comm, fragment_state& f) const {
    allreduce(comm, std::span<double>(f.report), op::sum{});
    const double total = f.report[weight];
    const double own_weight = f.own_report[weight];
    const double factor = total > 0.0 ? static_cast<double>(comm.size()) * own_weight / total : 0.0;
    if (factor != 1.0)
      for (float& x : f.sent) x = static_cast<float>(static_cast<double>(x) * factor);
    const std::span<float> data(f.sent);
    if (!f.feedback)
      allreduce(comm, data, op::avg{});
    else if (own_weight == 0.0)
      codec::visit(options_.codec, [&](const auto& coder) { allreduce(comm, data, op::avg{}, coder); });
    else
      f.feedback->visit([&](auto& feedback) { allreduce(comm, data, op::avg{}, feedback); });
  }

  // The background sync is done: theta steps, and the worker merges.
  void complete(fragment_state& f) {
    f.pending = false;
    waiting([&] { f.request.wait(); });
    this->stats_.bytes_sent += f.bytes_in_background;
    this->stats_.messages_sent += f.messages_in_background;
    apply_outer(f);
  }

  // The fragment whose sync has this number, if it is in flight.
  fragment_state* sync_numbered(std::uint64_t sequence) {
    for (fragment_state& f : fragments_)
      if (f.in_sync && f.sequence == sequence) return &f;
    return nullptr;
  }

  void settle_next() { complete(*sync_numbered(completed_ + 1)); }

  // Every pending sync completes, in order (syncs apply in their order:
  // two due at once merge at the same step).
  void settle() {
    for (fragment_state* f = sync_numbered(completed_ + 1); f && f->pending; f = sync_numbered(completed_ + 1))
      complete(*f);
  }

  // The job's progress and rate from the report; theta steps by the outer
  // gradient (theta - mean model, or the averaged outer gradients) unless
  // no worker had samples; then the worker's fragment becomes
  // alpha local + (1 - alpha) theta.
  void apply_outer(fragment_state& f) {
    f.watch.clear();
    f.in_sync = false;
    completed_ = f.sequence;
    last_synced_ = static_cast<std::size_t>(&f - fragments_.data());
    job_samples_ += static_cast<std::uint64_t>(f.report[samples_since_any]);
    if (options_.round_samples > 0 && f.report[samples_per_second] > 0.0)
      round_seconds_ = static_cast<double>(options_.round_samples) / f.report[samples_per_second];
    note_departures(f);
    note_arrival(f);
    if (f.report[weight] > 0.0) step_global(f);
    merge(f);
  }

  void step_global(fragment_state& f) {
    const outer_sgd& outer = options_.outer;
    if (!options_.codec && !options_.custom_outer && outer.learning_rate == 1.0 && outer.momentum == 0.0) {
      f.global = f.sent;  // theta - (theta - mean): the mean itself, as local SGD has it
      return;
    }
    if (!options_.codec)
      for (std::size_t k = 0; k < f.sent.size(); ++k) f.sent[k] = f.global[k] - f.sent[k];
    if (options_.custom_outer)
      options_.custom_outer(static_cast<std::size_t>(&f - fragments_.data()), f.global, f.sent);
    else
      sgd_step(f.global, f.sent, f.velocity, {outer.learning_rate, outer.momentum, outer.nesterov, 0.0});
  }

  void merge(fragment_state& f) {
    if (options_.mixing == 0.0) return f.model.copy_from(f.global);
    std::vector<float> local = f.model.snapshot();
    const auto alpha = static_cast<float>(options_.mixing);
    for (std::size_t k = 0; k < local.size(); ++k) local[k] = alpha * local[k] + (1.0f - alpha) * f.global[k];
    f.model.copy_from(local);
  }

  // -- Workers that leave ---------------------------------------------------

  // A member that says it leaves in sync k is in every sync before k + P
  // (each fragment once more) and in none from there: when sync k + P
  // starts, sync k (the same fragment's) has been applied everywhere.
  void note_departures(const fragment_state& f) {
    for (int member = 0; member < f.members; ++member) {
      if (f.report[member_states + static_cast<std::size_t>(member)] != leaving) continue;
      const int world = group_.world_rank(member);
      if (!departure_of(world)) departures_.push_back({world, f.sequence + fragments_.size()});
    }
  }

  std::optional<std::uint64_t> departure_of(int world_rank) const {
    for (const departure& d : departures_)
      if (d.world_rank == world_rank) return d.at;
    return std::nullopt;
  }

  // Before sync `sequence`: the members leaving there are let go and the
  // joiners entering there taken in (every pending sync completes first,
  // on every member alike; rank 0 welcomes each joiner).
  void change_members(std::uint64_t sequence) {
    std::vector<int> leavers, joiners;
    for (const departure& d : departures_)
      if (d.at == sequence) leavers.push_back(d.world_rank);
    for (const departure& a : arrivals_)
      if (a.at == sequence) joiners.push_back(a.world_rank);
    if (leavers.empty() && joiners.empty()) return;
    settle();
    // A leaver says farewell to those stopping in its last sync, the one
    // just settled: a member that was takes it here.
    const std::vector<int> members = group_.world_ranks();
    const bool stopping_then =
        fragments_[last_synced_].report.at(member_states + static_cast<std::size_t>(group_.rank())) != going_on;
    for (int world : leavers) {
      if (!membership_) break;
      const auto leaver = static_cast<int>(std::find(members.begin(), members.end(), world) - members.begin());
      membership_->farewell(group_, leaver);
      if (stopping_then) membership_->await_farewell(group_, leaver);
    }
    if (!leavers.empty()) regroup(group_.without(leavers));
    for (int world : joiners) {
      group_.admit(world);
      regroup(group_.with(world));
      if (group_.rank() == 0) welcome(group_.size() - 1);
      std::erase(introduced_, world);
    }
    std::erase_if(departures_, [&](const departure& d) { return d.at == sequence; });
    std::erase_if(arrivals_, [&](const departure& a) { return a.at == sequence; });
    open_to_joiners();
  }

  // The syncs run on `next` from now. A codec's error feedback keeps, in
  // slot 1, the residual of the part of the sum this rank encoded: laid out
  // by the group's size, it cannot carry over to another group (slot 0,
  // this worker's own outer gradient, does).
  void regroup(Communicator next) {
    group_ = std::move(next);
    for (fragment_state& f : fragments_)
      if (f.feedback) f.feedback->visit([](auto& feedback) { feedback.reset(1); });
  }

  // -- Workers that join ----------------------------------------------------

  static constexpr int state_tag = 4012;  // the welcome's models, beside admission::welcome_tag's words

  // Rank 0 of the group keeps the desk where joiners introduce themselves,
  // and the store names this group to them (admission.hpp).
  // Again when the group's id or its rank 0 changed (a recovery, a
  // departure), not otherwise: an introduction on the old desk's receive
  // would be lost.
  void open_to_joiners() {
    if (group_.store() == nullptr || group_.rank() != 0) return desk_.reset();
    if (desk_ && desk_group_ == group_.id()) return;
    admission::open(group_, "diloco");
    desk_.emplace();
    desk_->open(group_);
    desk_group_ = group_.id();
  }

  // Rank 0, between steps: joiners that introduced themselves; each is
  // named in a sync's report (one a sync) and enters P syncs later.
  void take_introductions() {
    if (!desk_) return;
    while (const std::optional<int> arrived = desk_->next(group_)) introduced_.push_back(*arrived);
  }

  void note_arrival(const fragment_state& f) {
    if (f.report[joiner] == 0.0) return;
    const int world = static_cast<int>(f.report[joiner]) - 1;
    if (std::none_of(arrivals_.begin(), arrivals_.end(), [&](const departure& a) { return a.world_rank == world; }))
      arrivals_.push_back({world, f.sequence + fragments_.size()});
  }

  // The welcome, as 64-bit words: the group (id, next sequence number,
  // members but the joiner), the agreement's instance and generation, the
  // syncs so far, and the counters every member holds alike; then every
  // fragment's theta and outer momentum.
  void welcome(int newcomer) {
    std::vector<std::int64_t> words{group_.id(),
                                    group_.sequence(),
                                    static_cast<std::int64_t>(membership_ ? membership_->instance() : 0),
                                    static_cast<std::int64_t>(membership_ ? membership_->generation() : 0),
                                    static_cast<std::int64_t>(completed_),
                                    static_cast<std::int64_t>(last_synced_),
                                    static_cast<std::int64_t>(job_samples_),
                                    bits_of(round_seconds_)};
    for (int member = 0; member < newcomer; ++member) words.push_back(group_.world_rank(member));
    std::vector<float> state;
    for (const fragment_state& f : fragments_) {
      state.insert(state.end(), f.global.begin(), f.global.end());
      state.insert(state.end(), f.velocity.begin(), f.velocity.end());
    }
    std::array<typename Communicator::request, 2> sent{
        group_.isend(std::span<const std::int64_t>(words), newcomer, admission::welcome_tag),
        group_.isend(std::span<const float>(state), newcomer, state_tag)};
    group_.wait_all(sent, "diloco: the welcome of a joiner");
  }

  // The joiner's side: introduced to the group's rank 0, it waits for the
  // welcome (sent when it enters: P syncs after rank 0 named it).
  void join(Communicator& world) {
    std::vector<std::int64_t> words(8 + static_cast<std::size_t>(world.transport().capacity()));
    std::vector<float> state;
    for (const fragment_state& f : fragments_) state.resize(state.size() + f.global.size() + f.velocity.size());
    this->metered(group_, "diloco join", [&] {
      std::array<typename Communicator::request, 2> welcomes{group_.irecv(std::span(words), 0, admission::welcome_tag),
                                                             group_.irecv(std::span(state), 0, state_tag)};
      admission::welcomed(group_, std::span(welcomes), {0},
                          "diloco join, waiting for the welcome of the group's rank 0 (it admits joiners)");
      words.resize(welcomes[0].received_bytes() / sizeof(std::int64_t));
    });
    if (words.size() < 9)
      throw error(errc::mismatch, "diloco join: rank 0's welcome is cut short",
                  {world.transport().rank(), group_.world_rank(0), "diloco join"});
    group_ = world.joined_group(static_cast<std::uint32_t>(words[0]), std::vector<int>(words.begin() + 8, words.end()),
                                static_cast<std::uint32_t>(words[1]));
    for (int peer = 0; peer + 1 < group_.size(); ++peer) group_.admit(group_.world_rank(peer));
    if (losses_.tolerated())
      membership_.emplace(static_cast<std::uint64_t>(words[2]), static_cast<std::uint64_t>(words[3]));
    completed_ = started_ = static_cast<std::uint64_t>(words[4]);
    last_synced_ = static_cast<std::size_t>(words[5]);
    job_samples_ = static_cast<std::uint64_t>(words[6]);
    round_seconds_ = double_of(words[7]);
    std::size_t at = 0;
    for (fragment_state& f : fragments_) {
      std::copy_n(state.begin() + static_cast<std::ptrdiff_t>(at), f.global.size(), f.global.begin());
      at += f.global.size();
      std::copy_n(state.begin() + static_cast<std::ptrdiff_t>(at), f.velocity.size(), f.velocity.begin());
      at += f.velocity.size();
      f.model.copy_from(f.global);
    }
    // Its next sync is the job's next; the others follow it a fraction of a round apart.
    next_ = (last_synced_ + 1) % fragments_.size();
    for (std::size_t k = 0; k < fragments_.size(); ++k) {
      fragment_state& f = fragments_[(next_ + k) % fragments_.size()];
      const double share = static_cast<double>(k) / static_cast<double>(fragments_.size());
      f.timed = round_seconds_ > 0.0;
      f.due = by_steps() ? 1.0 + share * static_cast<double>(options_.period)
              : f.timed  ? share * round_seconds_
                         : share * samples_per_worker();
    }
  }

  static std::int64_t bits_of(double value) {
    std::int64_t bits = 0;
    std::memcpy(&bits, &value, sizeof bits);
    return bits;
  }
  static double double_of(std::int64_t bits) {
    double value = 0;
    std::memcpy(&value, &bits, sizeof value);
    return value;
  }

  // A member that stops tells the others that stopped in its last sync
  // (its watch receives are gone; those going on let it go at its
  // departure) and waits until every other has told it. A death now takes
  // nothing from this worker: its model is final.
  void say_farewells() {
    if (!membership_) return;
    const std::vector<double>& last = fragments_[last_synced_].report;
    try {
      for (int peer = 0; peer < group_.size(); ++peer)
        if (peer != group_.rank() && last.at(member_states + static_cast<std::size_t>(peer)) != going_on)
          membership_->farewell(group_, peer);
      membership_->await_farewells(group_);
    } catch (const error& failure) {
      if (failure.category() != errc::peer_failure && failure.category() != errc::timeout) throw;
      for (int peer = 0; peer < group_.size(); ++peer)
        if (peer != group_.rank() && group_.peer_gone(peer))
          losses_.record(group_.world_rank(peer), this->stats_.steps);
    }
  }

  // -- Workers that die -----------------------------------------------------

  // Runs `work`; a failure that the policy tolerates becomes a recovery
  // (returns true then), any other is rethrown.
  template <class Work>
  bool surviving(Work&& work) {
    try {
      work();
      return false;
    } catch (const error& failure) {
      if (!membership_ || (failure.category() != errc::peer_failure && failure.category() != errc::timeout)) throw;
    }
    recover();
    return true;
  }

  // After a failure: the syncs that completed here are applied, the
  // survivors agree (round_membership::agree), and the last sync's result
  // goes from one that has it to those that do not. Retried while workers
  // keep dying.
  void recover() {
    broken_.store(true, std::memory_order_release);
    for (std::uint64_t sequence = completed_ + 1; sequence <= started_; ++sequence)
      for (fragment_state& f : fragments_) {
        if (!f.pending || !f.in_sync || f.sequence != sequence) continue;
        f.pending = false;
        bool done = false;
        try {  // those after one that failed fail at once (broken_)
          waiting([&] { f.request.wait(); });
          done = true;
        } catch (const error&) {}
        if (done && sequence == completed_ + 1) {
          this->stats_.bytes_sent += f.bytes_in_background;
          this->stats_.messages_sent += f.messages_in_background;
          apply_outer(f);
        }
      }
    for (fragment_state& f : fragments_) f.watch.clear();
    for (;;) {  // a failure to agree is final; one while handing over the last sync agrees again
      round_verdict<Communicator> verdict = membership_->agree(group_, completed_);
      if (verdict.excluded) {
        if (leaving_) return finish_departure();
        throw error(errc::peer_failure,
                    "diloco: the other workers went on without this one (it reached their agreement after the "
                    "communicator's timeout)",
                    {group_.transport().rank(), -1, "diloco recovery"});
      }
      for (int world : verdict.lost) losses_.record(world, this->stats_.steps);
      regroup(verdict.group);
      open_to_joiners();
      try {
        take_last_sync(verdict);
        break;
      } catch (const error& failure) {
        if (failure.category() != errc::peer_failure && failure.category() != errc::timeout) throw;
      }
    }
    restart_aborted();
    broken_.store(false, std::memory_order_release);
  }

  // The syncs completed differ by at most one between members: the first
  // member with the most sends that sync's fragment (theta, momentum) and
  // the job's counters to every member; the others apply it as theirs.
  void take_last_sync(const round_verdict<Communicator>& verdict) {
    const std::uint64_t most = verdict.most();
    if (most == verdict.least()) return;
    const int donor = verdict.donor();
    std::array<double, 3> header{static_cast<double>(last_synced_), static_cast<double>(job_samples_), round_seconds_};
    broadcast(group_, std::span<double>(header), donor);
    fragment_state& f = fragments_.at(static_cast<std::size_t>(header[0]));
    broadcast(group_, std::span<float>(f.global), donor);
    if (!f.velocity.empty()) broadcast(group_, std::span<float>(f.velocity), donor);
    if (completed_ == most) return;
    job_samples_ = static_cast<std::uint64_t>(header[1]);
    round_seconds_ = header[2];
    last_synced_ = static_cast<std::size_t>(header[0]);
    completed_ = most;
    f.in_sync = false;
    merge(f);
  }

  // The syncs that did not complete run again, in order, over the
  // survivors: their samples count again, and each is due at once.
  void restart_aborted() {
    started_ = completed_;
    departures_.clear();  // a leaver says so again, rank 0 names a joiner again
    arrivals_.clear();
    for (fragment_state& f : fragments_) {
      if (!f.in_sync) continue;
      f.in_sync = false;
      f.samples += static_cast<std::uint64_t>(f.own_report[weight]);
      samples_since_any_ += static_cast<std::uint64_t>(f.own_report[samples_since_any]);
      f.due = f.due_before;
    }
    next_ = completed_ == 0 ? first_to_sync() : (last_synced_ + 1) % fragments_.size();
  }

  // A leaver the others went on without (they reached the agreement first):
  // its last completed syncs stand.
  void finish_departure() { departed_ = true; }

  Communicator group_;  // the workers syncing now
  parameters model_;
  diloco_options options_;
  std::vector<fragment_state> fragments_;
  std::size_t next_ = 0;                       // the fragment that syncs next (every rank the same order)
  std::size_t last_synced_ = 0;                // the fragment of the last sync applied
  std::uint64_t started_ = 0, completed_ = 0;  // syncs started, applied
  std::uint64_t samples_ = 0;                  // this worker's
  std::uint64_t samples_since_any_ = 0;
  std::uint64_t job_samples_ = 0;
  double round_seconds_ = 0.0;  // T, the same bits on every rank
  double started_at_ = 0.0, waiting_ = 0.0;
  bool stopping_ = false, leaving_ = false, departed_ = false;
  std::vector<departure> departures_;                  // members that said they leave, and where
  std::vector<departure> arrivals_;                    // joiners named in a report, and where they enter
  std::optional<admission::desk<Communicator>> desk_;  // rank 0's, for joiners' introductions
  std::uint32_t desk_group_ = 0;                       // the group id it serves
  std::vector<int> introduced_;                        // rank 0: joiners (transport ranks) not yet welcomed
  peer_losses losses_;
  std::optional<round_membership<Communicator>> membership_;  // on_peer_failure = continue_
  std::atomic<bool> broken_{false};                           // a sync failed: the background starts no other
};

template <class C>
diloco(C&, parameters, diloco_options = {}) -> diloco<host_side_t<C>>;

}  // namespace chorus::averaging
