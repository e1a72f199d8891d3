// job_progress: the job's samples for schemes that have no collective to
// count them (GoSGD, the one-sided gossip, asynchronous EASGD, the
// parameter servers), so that a trainer's learning-rate schedule and its
// epochs follow the job's progress instead of its own: beside a 4x slower
// worker, each worker's own count puts it at a different point of the
// schedule (DiLoCo counts the job's samples itself: diloco::job_samples).
//
//   chorus::averaging::job_progress progress(comm, "train");
//   for (...) {
//     scheme.step(...);
//     progress.add(batch);
//     rate = schedule(progress.samples() / total);  // the same point of the schedule on every worker
//   }
//
// Every rank adds its samples to one counter in the job's store (its
// atomic add), at most once every `interval` (one round trip to the store;
// meanwhile it counts them here), and learns the job's total from the
// add's answer. samples() is that total plus what this rank processed
// since: it trails the job by at most `interval` of the other workers'
// samples, as Hivemind's progress tracker trails its peers' reports. A
// process that joins the job counts into the same counter. Without a store
// (a communicator made without one) it is this rank's samples times the
// ranks.
#pragma once

#include <chorus/bootstrap/store.hpp>

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace chorus::averaging {

class job_progress {
 public:
  using clock = std::chrono::steady_clock;

  template <class Communicator>
  job_progress(const Communicator& comm, std::string_view name,
               std::chrono::milliseconds interval = std::chrono::milliseconds(500))
      : store_(comm.store()),
        key_("chorus/progress/" + std::string(name)),
        ranks_(static_cast<std::uint64_t>(comm.size())),
        interval_(interval),
        flushed_at_(clock::now()) {}

  // This rank processed `samples` more; the store hears of them once the
  // interval since the last flush has passed.
  void add(std::uint64_t samples) {
    mine_ += samples;
    unflushed_ += samples;
    if (clock::now() - flushed_at_ >= interval_) flush();
  }

  // Adds what this rank counted since the last flush to the job's counter
  // now (before a decision that needs the latest total, or at the end).
  void flush() {
    flushed_at_ = clock::now();
    if (store_ == nullptr) return;
    job_at_flush_ = static_cast<std::uint64_t>(store_->add(key_, static_cast<std::int64_t>(unflushed_)));
    unflushed_ = 0;
  }

  // The job's samples as this rank knows them.
  std::uint64_t samples() const noexcept { return store_ ? job_at_flush_ + unflushed_ : mine_ * ranks_; }
  // This rank's own.
  std::uint64_t own() const noexcept { return mine_; }

 private:
  store::connection* store_;
  std::string key_;
  std::uint64_t ranks_;
  std::chrono::milliseconds interval_;
  clock::time_point flushed_at_;
  std::uint64_t mine_ = 0, unflushed_ = 0, job_at_flush_ = 0;
};

}  // namespace chorus::averaging
