// A mutex a scheme's progress-thread poller shares with its trainer
// (progress_thread.hpp): the trainer locks it, the poller only tries, and
// a try by the thread that holds it says no. In a simulation the pollers
// run inside their rank's own waits (progress_thread's `in_waits`), on the
// thread that may hold the lock already, where std::mutex::try_lock would
// be undefined.
#pragma once

#include <atomic>
#include <mutex>
#include <thread>

namespace chorus {

class poller_mutex {
 public:
  void lock() {
    mutex_.lock();
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
  }
  // False when this thread holds it, or another does.
  bool try_lock() {
    if (owner_.load(std::memory_order_relaxed) == std::this_thread::get_id()) return false;
    if (!mutex_.try_lock()) return false;
    owner_.store(std::this_thread::get_id(), std::memory_order_relaxed);
    return true;
  }
  void unlock() {
    owner_.store(std::thread::id{}, std::memory_order_relaxed);
    mutex_.unlock();
  }

 private:
  std::mutex mutex_;
  std::atomic<std::thread::id> owner_{};  // only this thread's own id compares equal to what it stored
};

}  // namespace chorus
