// The waiting policy, the one loop every wait of the transport goes through:
// spin (lowest latency, burns a core), yield (spin, but give the core away
// when nothing progressed), or block (after a short yield, sleep in the
// kernel on the worker's event descriptor until the network signals; for
// more ranks than cores). A thread may override its communicator's mode
// (the background worker yields, the progress thread blocks).
#pragma once

#include <chorus/transport/transport.hpp>

#include <ucp/api/ucp.h>

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <optional>
#include <thread>

namespace chorus::ucx {

using transport::clock;
using transport::progress_mode;

// The calling thread's override of the transport's mode, if any.
inline std::optional<progress_mode>& thread_mode() noexcept {
  thread_local std::optional<progress_mode> mode;
  return mode;
}

// Yield this long before sleeping: under oversubscription the peer we wait
// for often needs only our core for a moment; sleeping in the kernel at
// once cost 8x in latency on 4 ranks over 2 cores.
inline constexpr auto block_after_idle = std::chrono::microseconds(200);
// Reading the clock costs as much as an idle poll: spinning reads it once
// per this many idle polls (about a microsecond).
inline constexpr int spin_polls_per_clock_read = 64;

// Polls until done() or the deadline; returns done(). poll() progresses
// the network once (true if anything moved), watch(now) looks at the peers
// between idle polls, sleep(remaining) blocks until a network event.
template <class Done, class Poll, class Watch, class Sleep>
bool wait_until(progress_mode mode, Done&& done, clock::time_point deadline, Poll&& poll, Watch&& watch,
                Sleep&& sleep) {
  clock::time_point idle_since{};
  int idle_polls = 0;
  for (;;) {
    if (done()) return true;
    if (poll()) {
      idle_since = {};
      continue;
    }
    if (done()) return true;
    if (mode == progress_mode::spin && ++idle_polls < spin_polls_per_clock_read) continue;
    idle_polls = 0;
    const auto now = clock::now();
    watch(now);
    if (now >= deadline) return done();
    if (idle_since == clock::time_point{}) idle_since = now;
    switch (mode) {
      case progress_mode::spin: break;
      case progress_mode::yield: std::this_thread::yield(); break;
      case progress_mode::block:
        if (now - idle_since < block_after_idle)
          std::this_thread::yield();
        else
          sleep(deadline - now);
        break;
    }
  }
}

// Progresses the worker until it is idle (bounded); the caller holds the
// worker's lock.
inline void drain(ucp_worker_h worker) noexcept {
  for (int round = 0; round < 100000 && ucp_worker_progress(worker) != 0; ++round) {}
}

// Sleeps until the worker signals an event, at most `remaining` and in
// slices of 100 ms, so a failed peer or a deadline is noticed even if the
// transport that would have signalled it stays silent. `lock` serialises
// the worker.
inline void sleep_until_event(ucp_worker_h worker, int event_fd, std::mutex& lock, clock::duration remaining) {
  ucs_status_t status;
  {
    std::lock_guard held(lock);
    status = ucp_worker_arm(worker);
  }
  if (status != UCS_OK) return;  // UCS_ERR_BUSY: events are pending, progress again
  const auto slice = std::min<clock::duration>(remaining, std::chrono::milliseconds(100));
  pollfd descriptor{event_fd, POLLIN, 0};
  const auto ms = std::chrono::ceil<std::chrono::milliseconds>(slice).count();
  ::poll(&descriptor, 1, static_cast<int>(std::max<long long>(ms, 1)));
}

}  // namespace chorus::ucx
