// Non-blocking collectives: iallreduce, ibroadcast, iallgather, ibarrier start the
// operation on the communicator's background thread and return at once, so
// a trainer can overlap communication with its backward pass.
//
//   auto pending = chorus::iallreduce(comm, grads_of_last_layer);
//   ... compute ...
//   pending.wait();            // or pending.test()
//
// Each call takes its sequence numbers when it is made, so ranks agree on
// tags as long as they issue collectives in the same order (the usual rule),
// and blocking collectives may run on the caller's thread meanwhile. A call
// is non-blocking on every rank or on none: the background thread's
// shared-memory channel is not the caller's, so one rank's iallreduce does
// not meet another's allreduce on one host. The
// buffers must stay alive and untouched until the request completes. The
// request's wait is bounded by the communicator's timeout per operation
// queued ahead of it.
#pragma once

#include <chorus/collective/allgather/allgather.hpp>
#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/collective/broadcast/broadcast.hpp>
#include <chorus/collective/machinery/check.hpp>
#include <chorus/comm/background.hpp>
#include <chorus/core/error.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/memory_router.hpp>

#include <chrono>
#include <cstdint>
#include <future>
#include <span>
#include <string>

namespace chorus {

class collective_request {
 public:
  collective_request() = default;
  collective_request(std::future<void> done, std::chrono::milliseconds limit, std::string operation)
      : done_(std::move(done)), limit_(limit), operation_(std::move(operation)) {}

  bool valid() const noexcept { return done_.valid(); }

  // True once finished; rethrows the operation's error, if it failed.
  bool test() {
    require(done_.valid(), "test() on an empty or finished collective_request");
    if (done_.wait_for(std::chrono::seconds(0)) != std::future_status::ready) return false;
    done_.get();
    return true;
  }

  void wait() {
    require(done_.valid(), "wait() on an empty or finished collective_request");
    // The operation bounds each of its own waits; this guards the queue.
    if (done_.wait_for(background_worker::queued_wait_limit(limit_)) != std::future_status::ready)
      throw error(errc::timeout, "the background collective did not finish", {-1, -1, operation_});
    done_.get();
  }

 private:
  std::future<void> done_;
  std::chrono::milliseconds limit_{0};
  std::string operation_;
};

namespace collective {

// Sequence numbers a collective takes: its own, plus one for the check.
template <class Communicator>
std::uint32_t sequences_per_call(const Communicator& comm) {
  return check_enabled(comm) ? 2 : 1;
}

// Posts the call's flight-record entry now, in call order, and runs it on
// the background thread, where the front door it calls is part of it.
// `described` false: `call` is a name only, and the front door that `work`
// calls describes it (the Python binding's calls). `collectives`: how many
// collectives `work` makes (their sequence numbers are taken now).
template <class Communicator, class Work>
collective_request start(Communicator& comm, const record::call_description& call, Work work, bool described = true,
                         std::uint32_t collectives = 1) {
  record::posted_call posted = record::post(record::recorder_of(comm), call, described);
  Communicator forked = comm.fork_sequences(collectives * sequences_per_call(comm));
  // Device buffers order on the caller's stream, not the worker's (route/memory_router.hpp).
  return {comm.background().submit(on_callers_stream([forked, work, posted]() mutable {
            const record::recorded_call recorded(std::move(posted));
            work(forked);
          })),
          comm.timeout(), std::string(call.name.view())};
}

}  // namespace collective

template <class Communicator, element T, reduction_operator Op = op::sum>
collective_request iallreduce(Communicator& comm, std::span<T> data, Op op = {},
                              algorithm forced = algorithm::automatic) {
  return collective::start(comm, record::collective("iallreduce", data, op::name_of<Op>()),
                           [data, op, forced](Communicator& c) { allreduce(c, data, op, forced); });
}

template <class Communicator, element T>
collective_request ibroadcast(Communicator& comm, std::span<T> data, int root,
                              algorithm forced = algorithm::automatic) {
  return collective::start(comm, record::collective("ibroadcast", data, {}, root),
                           [data, root, forced](Communicator& c) { broadcast(c, data, root, forced); });
}

template <class Communicator>
collective_request ibarrier(Communicator& comm) {
  return collective::start(comm, record::collective("ibarrier"), [](Communicator& c) { c.barrier(); });
}

template <class Communicator, element T>
collective_request iallgather(Communicator& comm, std::span<const T> mine, std::span<T> all,
                              algorithm forced = algorithm::automatic) {
  return collective::start(comm, record::collective("iallgather", mine),
                           [mine, all, forced](Communicator& c) { allgather(c, mine, all, forced); });
}

}  // namespace chorus
