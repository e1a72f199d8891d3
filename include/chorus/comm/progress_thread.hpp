// A communicator-owned thread that keeps the network moving while the
// trainer computes, for schemes that must react to peers between their own
// calls (asynchronous EASGD's centre, GoSGD's incoming gossip).
//
//   auto registration = comm.progress_thread().add([&] { return serve_one(); });
//
// While at least one registration lives, the thread progresses the transport
// and calls every registered poller; a poller returns true when it did work.
// It waits with the `block` mode (yield briefly, then sleep in the kernel
// until the network signals), so an idle job costs no core. Pollers run on
// this thread only, one at a time; a registration's destructor waits until
// its poller is no longer running and will not be called again. A poller that
// throws is removed and its error kept for its owner (`rethrow_if_failed`).
//
// A simulated rank is a coroutine on the one thread every rank shares
// (sim/run.hpp): a thread beside it would race the simulation. There the
// progress thread has no thread of its own (`in_waits`): its transport
// calls poll() from its rank's waits, outside any poller, so the pollers
// run whenever the rank waits, which in a simulation, where local work
// costs no time, is whenever it is not done.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

namespace chorus {

class progress_thread {
 public:
  using poller = std::function<bool()>;
  // Progresses the network until `done()` or the deadline; the communicator
  // binds it to its transport in the `block` mode.
  using progress_function = std::function<void(const std::function<bool()>& done, std::chrono::milliseconds slice)>;

  class registration {
   public:
    registration() = default;
    registration(progress_thread* owner, std::uint64_t id) : owner_(owner), id_(id) {}
    registration(registration&& other) noexcept { *this = std::move(other); }
    registration& operator=(registration&& other) noexcept {
      if (this != &other) {
        release();
        owner_ = std::exchange(other.owner_, nullptr);
        id_ = other.id_;
      }
      return *this;
    }
    ~registration() { release(); }

    // Throws what the poller threw, if it did.
    void rethrow_if_failed() const {
      if (owner_ != nullptr) owner_->rethrow_if_failed(id_);
    }
    void release() {
      if (owner_ != nullptr) std::exchange(owner_, nullptr)->remove(id_);
    }
    // Releases, then throws what the poller threw, if it did: after it, the
    // owner may do the poller's work on its own thread.
    void stop() {
      if (owner_ == nullptr) return;
      if (std::exception_ptr failure = std::exchange(owner_, nullptr)->remove(id_)) std::rethrow_exception(failure);
    }

   private:
    progress_thread* owner_ = nullptr;
    std::uint64_t id_ = 0;
  };

  explicit progress_thread(progress_function progress) : progress_(std::move(progress)) {
    thread_ = std::thread([this] { run(); });
  }
  // Without a thread: whoever drives the network calls poll() (above).
  struct in_waits_t {};
  static constexpr in_waits_t in_waits{};
  explicit progress_thread(in_waits_t) noexcept {}
  progress_thread(const progress_thread&) = delete;
  progress_thread& operator=(const progress_thread&) = delete;
  ~progress_thread() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  // Whether the caller is this thread (a poller, then).
  bool is_this_thread() const noexcept {
    return thread_.joinable() ? std::this_thread::get_id() == thread_.get_id() : polling_;
  }

  // Without a thread: one pass over the pollers, unless one of them is
  // running (its own waits call this); true if one of them did work.
  bool poll() {
    if (polling_) return false;
    polling_ = true;
    const bool worked = poll_all();
    polling_ = false;
    return worked;
  }

  [[nodiscard]] registration add(poller work) {
    std::lock_guard lock(mutex_);
    const std::uint64_t id = ++last_id_;
    pollers_.emplace(id, entry{std::move(work), nullptr});
    changed_.notify_all();
    return registration(this, id);
  }

 private:
  struct entry {
    poller work;
    std::exception_ptr failure;
  };
  static constexpr std::chrono::milliseconds slice{2};  // how often `stopping_` is looked at

  // Waits until the poller is not running, forgets it, returns its failure.
  // Without a thread the caller is the one that runs pollers, so none is
  // running (a poller never removes itself: the thread would wait for it).
  std::exception_ptr remove(std::uint64_t id) {
    std::unique_lock lock(mutex_);
    if (thread_.joinable()) idle_.wait(lock, [&] { return running_ != id; });
    const auto found = pollers_.find(id);
    if (found == pollers_.end()) return nullptr;
    std::exception_ptr failure = found->second.failure;
    pollers_.erase(found);
    return failure;
  }

  void rethrow_if_failed(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    const auto found = pollers_.find(id);
    if (found != pollers_.end() && found->second.failure) std::rethrow_exception(found->second.failure);
  }

  // One pass over the live pollers; true if one of them did work.
  bool poll_all() {
    bool worked = false;
    std::uint64_t next = 0;
    for (;;) {
      poller* work = nullptr;
      {
        std::lock_guard lock(mutex_);
        auto found = pollers_.lower_bound(next);
        while (found != pollers_.end() && found->second.failure) ++found;
        if (found == pollers_.end()) break;
        running_ = found->first;
        next = found->first + 1;
        work = &found->second.work;
      }
      std::exception_ptr failure;
      try {
        worked = (*work)() || worked;
      } catch (...) {
        failure = std::current_exception();
      }
      {
        std::lock_guard lock(mutex_);
        if (failure) pollers_.at(running_).failure = failure;
        running_ = 0;
      }
      idle_.notify_all();
    }
    return worked;
  }

  bool has_live_pollers() const {
    for (const auto& [id, registered] : pollers_)
      if (!registered.failure) return true;
    return false;
  }

  void run() {
    for (;;) {
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stopping_ || has_live_pollers(); });
        if (stopping_) return;
      }
      if (!poll_all()) progress_([this] { return poll_all(); }, slice);
    }
  }

  progress_function progress_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::condition_variable idle_;
  std::map<std::uint64_t, entry> pollers_;
  std::uint64_t last_id_ = 0;
  std::uint64_t running_ = 0;
  bool stopping_ = false;
  bool polling_ = false;  // without a thread: inside poll()
  std::thread thread_;
};

}  // namespace chorus
