// A communicator-owned thread that runs queued work (non-blocking
// collectives) in order, so the trainer's thread can compute meanwhile.
//
// It waits on the network with the `yield` progress mode whatever the
// communicator uses: a spinning helper would steal a core from the trainer.
// Started on first use; the destructor finishes the queued work and joins.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace chorus {

class background_worker {
 public:
  explicit background_worker(std::function<void()> on_start = {}) {
    thread_ = std::thread([this, on_start = std::move(on_start)] {
      if (on_start) on_start();
      run();
    });
  }

  background_worker(const background_worker&) = delete;
  background_worker& operator=(const background_worker&) = delete;

  ~background_worker() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    ready_.notify_one();
    thread_.join();
  }

  // How long to wait for a task queued behind a few others whose waits are
  // each bounded by `per_task`.
  static std::chrono::milliseconds queued_wait_limit(std::chrono::milliseconds per_task) {
    return per_task * queued_ahead_bound + std::chrono::seconds(5);
  }

  std::future<void> submit(std::function<void()> work) {
    std::packaged_task<void()> task(std::move(work));
    std::future<void> done = task.get_future();
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(task));
    }
    ready_.notify_one();
    return done;
  }

 private:
  void run() {
    for (;;) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lock(mutex_);
        ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        task = std::move(queue_.front());
        queue_.pop_front();
      }
      task();  // exceptions land in the future
    }
  }

  static constexpr int queued_ahead_bound = 4;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::packaged_task<void()>> queue_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace chorus
