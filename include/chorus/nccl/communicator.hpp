// chorus::nccl::communicator: an NCCL communicator made from a chorus one,
// one GPU per rank. Device memory goes through NCCL; host memory through the
// chorus communicator it was made from (UCX), so code written against a
// communicator (the collectives, the schemes) runs on it unchanged.
//
//   chorus::communicator comm = chorus::init();
//   chorus::nccl::communicator gpus = chorus::nccl::connect(comm);  // nccl/library.hpp
//   chorus::cuda::stream_scope ordered(stream);                     // optional: the caller's stream
//   chorus::allreduce(gpus, std::span(device_grads, n));            // ncclAllReduce; returns algo::nccl
//
// Bootstrap: rank 0 makes the ncclUniqueId and puts it in chorus's store
// under a key of its own (a fresh communicator id); the others read it from
// there, bounded by the timeout. If rank 0 cannot make one, it puts its
// error there instead, so every rank fails at once rather than waiting.
//
// The device: options.device, else CHORUS_LOCAL_RANK (else the rank) modulo
// the GPUs this process sees.
//
// Waiting: NCCL runs in its non-blocking mode, and every wait polls
// ncclCommGetAsyncError and the stream until done, at most the timeout
// (CHORUS_TIMEOUT). An asynchronous error or the timeout aborts the NCCL
// communicator (ncclCommAbort, which also frees a kernel stuck on a dead
// peer) and becomes a chorus::error: peer_failure, timeout, ... A call is
// synchronous by default (it returns when the stream has done it, as every
// chorus collective returns with its result in place); with
// options.synchronous = false it returns once enqueued, and wait(stream) is
// the bounded wait for the stream.
//
// Not thread-safe, like chorus::communicator: one thread calls it at a time.
#pragma once

#include <chorus/collective/machinery/check.hpp>
#include <chorus/collective/machinery/selection.hpp>
#include <chorus/comm/progress_thread.hpp>
#include <chorus/core/env.hpp>
#include <chorus/nccl/adapter.hpp>
#include <chorus/route/memory_router.hpp>

#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace chorus::nccl {

struct options {
  int device = -1;                       // -1: CHORUS_LOCAL_RANK (else the rank) modulo the GPUs seen
  std::chrono::milliseconds timeout{0};  // 0: the chorus communicator's (CHORUS_TIMEOUT)
  bool synchronous = true;               // false: calls return once enqueued on the stream
};

namespace detail {

inline std::string to_hex(const unique_id& id) {
  std::string text;
  char digits[3];
  for (std::byte b : id) {
    std::snprintf(digits, sizeof digits, "%02x", static_cast<unsigned>(b));
    text += digits;
  }
  return text;
}

inline unique_id from_hex(std::string_view text) {
  unique_id id{};
  if (text.size() != 2 * id.size()) throw error(errc::mismatch, "a malformed NCCL unique id in the store");
  for (std::size_t k = 0; k < id.size(); ++k)
    id[k] = static_cast<std::byte>(std::stoul(std::string(text.substr(2 * k, 2)), nullptr, 16));
  return id;
}

}  // namespace detail

class communicator {
 public:
  // Asynchronous schemes run on this (averaging/scheme.hpp, host_side).
  using host_communicator = chorus::communicator;

  communicator() = default;  // empty: valid() is false (a split's negative color)

  // Collective over `from`.
  communicator(chorus::communicator& from, std::shared_ptr<adapter> through, options given = {})
      : communicator(from.split(0, from.rank()), std::move(through), given, own_split{}) {}

  communicator(communicator&& other) noexcept { *this = std::move(other); }
  communicator& operator=(communicator&& other) noexcept {
    if (this == &other) return *this;
    close();
    host_ = std::move(other.host_);
    through_ = std::move(other.through_);
    endpoint_ = std::move(other.endpoint_);
    given_ = other.given_;
    device_ = other.device_;
    timeout_ = other.timeout_;
    failure_ = std::move(other.failure_);
    group_ = std::move(other.group_);
    return *this;
  }
  communicator(const communicator&) = delete;
  communicator& operator=(const communicator&) = delete;

  // Finalizes (bounded) and destroys the NCCL communicator; aborts it
  // instead after an error or while an exception unwinds.
  ~communicator() { close(); }

  bool valid() const noexcept { return endpoint_ != nullptr; }
  int rank() const noexcept { return host_.rank(); }
  int size() const noexcept { return host_.size(); }
  int device() const noexcept { return device_; }
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  const options& config() const noexcept { return given_; }
  // This communicator's own chorus communicator: host memory, and the
  // host-side messages of the schemes, go through it.
  chorus::communicator& host() noexcept { return host_; }
  adapter& through() const noexcept { return *through_; }
  // The rule every collective and scheme step keeps (comm/pending_merges.hpp).
  void require_merged(std::string_view operation, const void* caller = nullptr) const {
    host_.require_merged(operation, caller);
  }

  // Whether the call goes through the adapter: every non-empty buffer is
  // memory it moves (a call of empty buffers does too, as an NCCL call of
  // no elements, so that every rank takes the same path). A call mixing
  // device and host buffers is an error that says so.
  template <class... Spans>
  bool moves(std::string_view operation, const Spans&... buffers) const {
    int device = 0, host = 0;
    ((buffers.empty() ? void() : void(++(through_->moves(buffers.data()) ? device : host))), ...);
    if (device > 0 && host > 0)
      throw error(errc::invalid_argument,
                  "some buffers are device memory and some are not; NCCL needs them all on the device",
                  {host_.transport().rank(), -1, std::string(operation)});
    return host == 0;
  }

  // Collective over this communicator, like chorus::communicator::split:
  // ranks with the same color form a new NCCL communicator, ordered by
  // (key, rank), on the same devices; a negative color gets an empty one.
  communicator split(int color, int key) {
    chorus::communicator part = host_.split(color, key);
    if (!part.valid()) return {};
    options same = given_;
    same.device = device_;
    same.timeout = timeout_;
    return communicator(std::move(part), through_, same, own_split{});
  }

  // Enqueues enqueue(endpoint, stream) on the caller's stream (the
  // innermost cuda::stream_scope; else the default stream) and, unless
  // options.synchronous is false, waits until the stream has done it.
  template <class Enqueue>
  void run(std::string_view operation, Enqueue&& enqueue) {
    require_usable(operation);
    const stream_handle stream = chorus::detail::thread_stream();
    enqueue(*endpoint_, stream);
    if (given_.synchronous)
      wait(stream, operation);
    else
      await([] { return true; }, operation);  // enqueue errors, without waiting for the stream
  }

  // Waits until `stream` has done its work, polling NCCL's asynchronous
  // error: the bounded replacement for cudaStreamSynchronize.
  void wait(stream_handle stream, std::string_view operation = "nccl wait") {
    require_usable(operation);
    await([&] { return endpoint_->stream_idle(stream); }, operation);
  }

  // Point-to-point in the shape of chorus::communicator's, so that
  // neighbour_exchange, and with it D-PSGD, runs on an NCCL communicator.
  // Memory the adapter moves is queued and posted as one NCCL group (sends
  // and receives started together cannot deadlock) at the next wait, which
  // is bounded like every wait here; host memory goes through the chorus
  // communicator at once. NCCL has no tags: messages between two ranks
  // match in the order they were posted, and a receive takes exactly its
  // buffer's size.
  class request {
   public:
    std::size_t received_bytes() const noexcept { return on_host_ ? on_host_->received_bytes() : received_; }
    int peer() const noexcept { return on_host_ ? on_host_->peer() : peer_; }

   private:
    friend class communicator;
    std::optional<chorus::communicator::request> on_host_;
    std::size_t received_ = 0;
    int peer_ = -1;
  };

  template <class U, std::size_t E>
  request isend(std::span<U, E> data, int peer, int user_tag = 0) {
    return post(std::as_bytes(data).data(), data.size_bytes(), peer, true,
                [&] { return host_.isend(data, peer, user_tag); });
  }
  template <class U, std::size_t E>
  request irecv(std::span<U, E> data, int peer, int user_tag = 0) {
    return post(std::as_writable_bytes(data).data(), data.size_bytes(), peer, false,
                [&] { return host_.irecv(data, peer, user_tag); });
  }
  void wait_all(std::span<request> requests, std::string_view operation = "wait_all") {
    post_group(operation);
    for (request& r : requests)
      if (r.on_host_) host_.wait(*r.on_host_, operation);
  }
  void wait(request& r, std::string_view operation = "wait") { wait_all(std::span<request>(&r, 1), operation); }
  void expect_bytes(const request& r, std::size_t expected, std::string_view operation) const {
    if (r.on_host_) host_.expect_bytes(*r.on_host_, expected, operation);
  }
  chorus::progress_thread& progress_thread() { return host_.progress_thread(); }

  // Stops everything this communicator has in flight; it is unusable after.
  void abort(std::string reason = "aborted by the caller") noexcept {
    if (!endpoint_ || failure_) return;
    failure_ = std::move(reason);
    endpoint_->abort();
  }

 private:
  struct own_split {};

  communicator(chorus::communicator own, std::shared_ptr<adapter> through, options given, own_split)
      : host_(std::move(own)), through_(std::move(through)), given_(given) {
    if (!through_) throw error(errc::invalid_argument, "nccl::communicator: no adapter");
    timeout_ = given_.timeout.count() > 0 ? given_.timeout : host_.timeout();
    device_ = choose_device();
    const unique_id id = agree_on_id();
    endpoint_ = through_->connect(host_, id, device_);
    await([] { return true; }, "nccl connect");
  }

  struct queued {
    const std::byte* data;
    std::size_t bytes;
    int peer;
    bool sending;
  };

  template <class OnHost>
  request post(const std::byte* data, std::size_t bytes, int peer, bool sending, OnHost&& on_host) {
    request made;
    if (bytes > 0 && !through_->moves(data)) {
      made.on_host_ = on_host();
      return made;
    }
    if (peer < 0 || peer >= size())
      throw error(errc::invalid_argument,
                  "peer " + std::to_string(peer) + " is not in [0, " + std::to_string(size()) + ")",
                  {host_.transport().rank(), -1, sending ? "send" : "recv"});
    group_.push_back({data, bytes, peer, sending});
    made.peer_ = peer;
    made.received_ = sending ? 0 : bytes;
    return made;
  }

  // The queued sends and receives, as one group of byte transfers.
  void post_group(std::string_view operation) {
    if (group_.empty()) return;
    std::vector<queued> posting;
    posting.swap(group_);
    run(operation, [&](endpoint& nccl, stream_handle stream) {
      nccl.group_start();
      for (const queued& q : posting) {
        if (q.sending)
          nccl.send(q.data, q.bytes, dtype::uint8, q.peer, stream);
        else
          nccl.recv(const_cast<std::byte*>(q.data), q.bytes, dtype::uint8, q.peer, stream);
      }
      nccl.group_end();
    });
  }

  int choose_device() {
    if (given_.device >= 0) return given_.device;
    const int seen = through_->devices();
    if (seen <= 0) return 0;  // none: connect() fails and says why (CUDA's error, NCCL's answer)
    const auto local = env::get_integer("CHORUS_LOCAL_RANK", 0, 1 << 30);
    return static_cast<int>(local.value_or(host_.rank()) % seen);
  }

  // Rank 0 makes the id and puts it (or its failure) in the store; the
  // others read it there. A job of one rank needs no store.
  unique_id agree_on_id() {
    const std::string key = "chorus/nccl-id/" + std::to_string(host_.id());
    store::connection* store = host_.store();
    if (host_.rank() == 0) {
      std::string published;
      try {
        const unique_id id = through_->new_id();
        published = "id:" + detail::to_hex(id);
        if (store != nullptr && size() > 1) store->set(key, published);
        return id;
      } catch (const std::exception& failed) {
        if (store != nullptr && size() > 1) store->set(key, std::string("error:") + failed.what());
        throw;
      }
    }
    if (store == nullptr)
      throw error(errc::invalid_argument, "nccl::communicator: a job of several ranks without a store");
    const std::string value = store->wait(key, timeout_);
    if (value.rfind("error:", 0) == 0)
      throw error(errc::unavailable, "rank 0 could not make the NCCL unique id: " + value.substr(6),
                  {host_.transport().rank(), host_.world_rank(0), "nccl connect"});
    return detail::from_hex(std::string_view(value).substr(3));
  }

  // The one wait of this layer: polls the asynchronous error, then ready(),
  // until the timeout; an error or the timeout aborts the communicator.
  template <class Ready>
  void await(Ready&& ready, std::string_view operation) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (unsigned polls = 0;; ++polls) {
      const health now = endpoint_->check();
      if (now.failed()) fail(now.category, std::string(to_string(now.state)) + ": " + now.detail, operation);
      if (!now.in_progress() && ready()) return;
      if (std::chrono::steady_clock::now() >= deadline)
        fail(errc::timeout,
             "not done within " + std::to_string(timeout_.count()) +
                 " ms (the timeout); the NCCL communicator was aborted",
             operation);
      // Yield first (a collective is often done in microseconds), then
      // sleep, so a rank waiting on a slow peer leaves the core to others.
      if (polls < 1000)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }

  [[noreturn]] void fail(errc category, std::string reason, std::string_view operation) {
    abort(reason);
    throw error(category, "nccl: " + reason, {host_.transport().rank(), -1, std::string(operation)});
  }

  void require_usable(std::string_view operation) const {
    if (!endpoint_) throw error(errc::invalid_argument, "an empty NCCL communicator", {-1, -1, std::string(operation)});
    if (failure_)
      throw error(errc::invalid_argument, "this NCCL communicator was aborted (" + *failure_ + "); make a new one",
                  {host_.transport().rank(), -1, std::string(operation)});
  }

  void close() noexcept {
    if (!endpoint_) return;
    if (failure_ || std::uncaught_exceptions() > 0) {
      abort("closed while failing");
    } else {
      try {
        endpoint_->finalize();
        await([] { return true; }, "nccl finalize");
      } catch (...) {  // await aborted it; a destructor reports nothing more
      }
    }
    endpoint_.reset();
  }

  chorus::communicator host_;
  std::shared_ptr<adapter> through_;
  std::unique_ptr<endpoint> endpoint_;
  options given_;
  int device_ = -1;
  std::chrono::milliseconds timeout_{0};
  std::optional<std::string> failure_;
  std::vector<queued> group_;  // sends and receives waiting for the next wait
};

}  // namespace chorus::nccl
