// ucx_transport: the Transport concept over the UCP tag API.
//
// One UCP context and one worker per rank; one endpoint per peer (self
// included), created from worker addresses that the caller exchanges (the
// communicator does it through the bootstrap store). Endpoints use
// UCP_ERR_HANDLING_MODE_PEER, so a dead peer fails the operations that
// involve it instead of leaving them pending forever.
//
// Matching: UCP matches receives on the tag alone, not on the sender, so the
// top `rank_bits` of every wire tag carry the sender's rank and a receive from
// peer p matches only tags that p sent.
//
// Failure detection: UCX reports a dead peer through the endpoint error
// handler (TCP reset, keepalive); for peers on this host the transport also
// watches the peer's process (peer_process.hpp) every `watch_interval` while
// anyone progresses, which UCX's shared-memory transports do not do well. A
// failed peer's endpoint is force-closed at once, so sends to it complete
// with an error instead of waiting for a flush.
//
// Teardown after a failure is bounded: the first failure (or timeout) starts
// an `abandon_budget`; cancelling a pending request waits for UCX's
// acknowledgement only until that budget runs out, however many requests an
// unwinding collective drops, instead of up to a second each.
//
// Waiting: spin, yield or block (ucp_worker_arm + poll on the worker's event
// fd). Block mode needs UCP_FEATURE_WAKEUP, which is requested only then, so
// the spinning modes keep every UCX transport available.
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/core/memory_kind.hpp>
#include <chorus/transport/peer_process.hpp>
#include <chorus/transport/transport.hpp>
#include <chorus/transport/ucx_shm_orphans.hpp>

#include <ucp/api/ucp.h>

#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

namespace chorus::ucx {

using transport::clock;
using transport::progress_mode;
using transport::tag_t;

struct config {
  int rank = 0;
  int size = 1;
  progress_mode progress = progress_mode::spin;
};

namespace detail {

// Shared between a request handle and the UCX completion callback. Whoever
// lets go last frees it, so dropping a pending request can never make the
// callback write into freed memory.
struct operation_state {
  std::atomic<int> references{2};  // the handle's and the callback's
  std::atomic<ucs_status_t> status{UCS_INPROGRESS};
  std::size_t received = 0;
  void* ucp_request = nullptr;
  std::atomic<int>* outstanding = nullptr;  // the peer's count of operations in flight
};

// The operation is over (completed, failed or cancelled): the peer has one
// operation fewer in flight.
inline void finished(operation_state* state) noexcept {
  if (state->outstanding != nullptr) state->outstanding->fetch_sub(1, std::memory_order_acq_rel);
}

inline void release(operation_state* state) noexcept {
  if (state != nullptr && state->references.fetch_sub(1, std::memory_order_acq_rel) == 1)
    delete state;
}

inline void on_send_done(void* ucp_request, ucs_status_t status, void* user_data) {
  auto* state = static_cast<operation_state*>(user_data);
  finished(state);
  state->status.store(status, std::memory_order_release);
  ucp_request_free(ucp_request);
  release(state);
}

inline void on_recv_done(void* ucp_request, ucs_status_t status,
                         const ucp_tag_recv_info_t* info, void* user_data) {
  auto* state = static_cast<operation_state*>(user_data);
  if (status == UCS_OK) state->received = info->length;
  finished(state);
  state->status.store(status, std::memory_order_release);
  ucp_request_free(ucp_request);
  release(state);
}

inline bool is_peer_failure(ucs_status_t status) noexcept {
  return status == UCS_ERR_CONNECTION_RESET || status == UCS_ERR_ENDPOINT_TIMEOUT ||
         status == UCS_ERR_UNREACHABLE || status == UCS_ERR_REJECTED ||
         status == UCS_ERR_NOT_CONNECTED || status == UCS_ERR_CANCELED;
}

}  // namespace detail

class ucx_transport;

class request {
 public:
  request() = default;
  request(request&& other) noexcept { *this = std::move(other); }
  request& operator=(request&& other) noexcept {
    if (this != &other) {
      reset();
      owner_ = std::exchange(other.owner_, nullptr);
      state_ = std::exchange(other.state_, nullptr);
      peer_ = other.peer_;
      tag_ = other.tag_;
      is_receive_ = other.is_receive_;
    }
    return *this;
  }
  request(const request&) = delete;
  request& operator=(const request&) = delete;
  ~request() { reset(); }

  bool done() const noexcept {
    return state_ == nullptr ||
           state_->status.load(std::memory_order_acquire) != UCS_INPROGRESS;
  }
  bool succeeded() const noexcept { return state_ == nullptr || status() == UCS_OK; }
  int peer() const noexcept { return peer_; }
  tag_t tag() const noexcept { return tag_; }
  bool is_receive() const noexcept { return is_receive_; }
  std::size_t received_bytes() const noexcept { return state_ ? state_->received : 0; }
  ucs_status_t status() const noexcept {
    return state_ ? state_->status.load(std::memory_order_acquire) : UCS_OK;
  }

  // Cancels a pending operation (bounded wait for UCX to acknowledge).
  inline void reset() noexcept;

 private:
  // Drops a request that was never handed to UCX (both references are ours).
  void abandon_unsent() noexcept {
    detail::finished(state_);  // it was counted as in flight
    delete std::exchange(state_, nullptr);
    owner_ = nullptr;
  }

 public:

 private:
  friend class ucx_transport;
  ucx_transport* owner_ = nullptr;
  detail::operation_state* state_ = nullptr;
  int peer_ = -1;
  tag_t tag_ = 0;
  bool is_receive_ = false;
};

class ucx_transport {
 public:
  using request = ucx::request;

  explicit ucx_transport(const config& settings)
      : rank_(settings.rank), size_(settings.size), mode_(settings.progress) {
    require(size_ >= 1 && size_ <= transport::max_ranks, "ucx_transport: size out of range");
    require(rank_ >= 0 && rank_ < size_, "ucx_transport: rank out of range");
    create_context();
    create_worker();
    peers_.resize(static_cast<std::size_t>(size_));
    for (int peer = 0; peer < size_; ++peer) {
      peers_[static_cast<std::size_t>(peer)] = std::make_unique<peer_slot>();
      peers_[static_cast<std::size_t>(peer)]->owner = this;
      peers_[static_cast<std::size_t>(peer)]->rank = peer;
    }
  }

  ucx_transport(const ucx_transport&) = delete;
  ucx_transport& operator=(const ucx_transport&) = delete;

  ~ucx_transport() {
    close_endpoints();
    if (worker_address_ != nullptr) ucp_worker_release_address(worker_, worker_address_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  progress_mode mode() const noexcept { return mode_; }
  chorus::memory_kinds memory_kinds() const noexcept { return memory_kinds_; }

  // This worker's address, to be published for the peers.
  std::span<const std::byte> address() const noexcept {
    return {reinterpret_cast<const std::byte*>(worker_address_), worker_address_length_};
  }

  void connect(int peer, std::span<const std::byte> peer_address) {
    check_peer(peer, "connect");
    ucp_ep_params_t params{};
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &on_endpoint_error;
    params.err_handler.arg = peers_[static_cast<std::size_t>(peer)].get();
    std::lock_guard lock(mutex_);
    ucp_ep_h endpoint = nullptr;
    const ucs_status_t status = ucp_ep_create(worker_, &params, &endpoint);
    if (status != UCS_OK) {
      // A peer that died during start-up (its shared memory is gone): its failure.
      if (peer_gone(peer))
        throw error(errc::peer_failure, std::string("ucp_ep_create: ") + ucs_status_string(status) + ": " +
                                            failure_text(peer), {rank_, peer, "connect"});
      throw error(errc::transport, std::string("ucp_ep_create: ") + ucs_status_string(status),
                  {rank_, peer, "connect"});
    }
    peers_[static_cast<std::size_t>(peer)]->endpoint = endpoint;
  }

  // Watches a peer's process: if it runs on this host (same kernel and
  // namespaces), its death becomes a peer failure within `watch_interval`.
  void watch_process(int peer, const transport::process_identity& process) {
    check_peer(peer, "connect");
    if (peer == rank_ || process.host != self_.host || process.pid == self_.pid) return;  // threads of one process
    std::lock_guard lock(mutex_);
    peers_[static_cast<std::size_t>(peer)]->process = process;
  }

  // UCX defaults chorus changes, set in the environment once per process
  // before any context reads it (UCT options cannot be set through
  // ucp_config_modify); a user's value always wins. connect() calls this
  // before anything reads the environment: setenv while another thread
  // reads it is a data race (ranks as threads start concurrently), and the
  // once-only initialisation makes every other caller wait until it is done.
  //
  // Shared-memory transports can detect a dead peer (they check that its
  // process is alive) but UCX hides that unless asked; without it the PEER
  // error mode pushes intra-node traffic onto TCP, 30x slower. The keepalive
  // that runs the check defaults to 20 s, longer than users wait for an
  // error; 1 s costs one tiny message per endpoint per second.
  //
  // When the user restricts UCX_TLS to tcp (and self), large messages go
  // eager in 64 KiB fragments. A rendezvous handshake queues behind bulk
  // data on a busy link: on a shaped 1 Gbit/s network that cost the
  // encode-once compressed allreduce 10-25% (docs/performance.md), and TCP
  // copies through the kernel either way. The eager fragments are copied
  // (bcopy), never zero-copy: UCX 1.13's TCP transport completes a
  // zero-copy send twice when the socket fails under it (a peer died) and
  // aborts on its own assertion (the cross-host kill test saw it in 2 of
  // 68 jobs); on loopback TCP the copy was as fast or faster, 1 KiB-32 MiB.
  // (The shared-memory options are not set then: UCX warns about them.)
  static void prepare_environment() {
    static const bool done = [] {
      ::setenv("UCX_KEEPALIVE_INTERVAL", "1s", 0);
      const char* tls = std::getenv("UCX_TLS");
      if (tls != nullptr && only_tcp(tls)) {
        ::setenv("UCX_RNDV_THRESH", "inf", 0);
        ::setenv("UCX_ZCOPY_THRESH", "inf", 0);
        ::setenv("UCX_TCP_TX_SEG_SIZE", "64K", 0);
      } else {
        ::setenv("UCX_POSIX_ERROR_HANDLING", "y", 0);
        ::setenv("UCX_SYSV_ERROR_HANDLING", "y", 0);
      }
      return true;
    }();
    (void)done;
  }

  // True once an operation failed or timed out: the transport is being torn
  // down, and whoever hosts shared services should not wait for its peers.
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

  // The job is going down for a reason above the transport (a scheme's own
  // deadline, an exception unwinding the communicator): start the abandon
  // budget, so cancels and teardown do not wait on peers that may never
  // answer (a flush to a stopped peer held teardown 2 s).
  void abandon() noexcept { note_failure(); }

  // The failure UCX reported for a peer's endpoint, if any.
  std::optional<ucs_status_t> peer_failure(int peer) const noexcept {
    const ucs_status_t status =
        peers_[static_cast<std::size_t>(peer)]->failure.load(std::memory_order_acquire);
    if (status == UCS_OK) return std::nullopt;
    return status;
  }

  request isend(int peer, tag_t tag, std::span<const std::byte> data) {
    check_peer(peer, "send");
    check_tag(tag, peer, "send");
    if (peer_failure(peer)) {
      note_failure();
      throw error(errc::peer_failure, "peer is gone: " + failure_text(peer), {rank_, peer, "send"});
    }
    request handle = make_request(peer, tag, false);
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    params.cb.send = &detail::on_send_done;
    params.user_data = handle.state_;
    std::lock_guard lock(mutex_);
    ucp_ep_h endpoint = peers_[static_cast<std::size_t>(peer)]->endpoint;
    if (endpoint == nullptr) {
      handle.abandon_unsent();
      if (peer_failure(peer))  // closed by a failure noticed since the check above
        throw error(errc::peer_failure, "peer is gone: " + failure_text(peer), {rank_, peer, "send"});
      throw error(errc::invalid_argument, "no endpoint: connect() was not called", {rank_, peer, "send"});
    }
    const ucs_status_ptr_t result = ucp_tag_send_nbx(
        endpoint, data.empty() ? static_cast<const void*>(&empty_) : data.data(), data.size(),
        wire_tag(rank_, tag), &params);
    track(handle, result);
    return handle;
  }

  request irecv(int peer, tag_t tag, std::span<std::byte> data) {
    check_peer(peer, "recv");
    check_tag(tag, peer, "recv");
    request handle = make_request(peer, tag, true);
    ucp_request_param_t params{};
    // UCX 1.13 leaves recv_info empty when a receive completes inside the
    // call, so the length would be lost: always complete through the callback.
    params.op_attr_mask =
        UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    params.cb.recv = &detail::on_recv_done;
    params.user_data = handle.state_;
    std::lock_guard lock(mutex_);
    const ucs_status_ptr_t result = ucp_tag_recv_nbx(
        worker_, data.empty() ? static_cast<void*>(&empty_) : data.data(), data.size(),
        wire_tag(peer, tag), ~tag_t{0}, &params);
    track(handle, result);
    return handle;
  }

  // One round of network progress; true if anything happened. Every
  // `polls_per_watch` idle rounds it reads the clock to watch the peers, so
  // a caller's own polling loop notices a dead peer too.
  bool progress() {
    std::lock_guard lock(mutex_);
    const bool moved = ucp_worker_progress(worker_) != 0;
    if (!moved && ++idle_polls_ >= polls_per_watch) {
      idle_polls_ = 0;
      watch_peers(clock::now());
    }
    if (failures_pending_.load(std::memory_order_acquire)) close_failed_endpoints();
    return moved;
  }

  // True once the request completed successfully; throws if it failed.
  bool test(request& handle) {
    if (!handle.done()) progress();
    if (!handle.done()) {
      if (handle.is_receive() && peer_failure(handle.peer())) raise(handle, "test");
      return false;
    }
    if (!handle.succeeded()) raise(handle, "test");
    return true;
  }

  void wait(request& handle, clock::time_point deadline, std::string_view operation) {
    wait_all(std::span<request>(&handle, 1), deadline, operation);
  }

  void wait_all(std::span<request> handles, clock::time_point deadline,
                std::string_view operation) {
    progress_until([&] { return settled(handles) || doomed_peer() >= 0; }, deadline);
    for (request& handle : handles)
      if (handle.done() ? !handle.succeeded() : peer_failure(handle.peer()).has_value()) raise(handle, operation);
    if (const int doomed = doomed_peer(); doomed >= 0) raise_doomed(doomed, operation);
    for (request& handle : handles)
      if (!handle.done()) raise_timeout(handle, deadline, operation);
  }

  // Overrides the waiting mode for the calling thread (a background thread
  // should yield rather than spin). Block needs the context's wakeup
  // support, so without it the override falls back to yield.
  static void set_thread_progress_mode(progress_mode mode) noexcept { thread_mode() = mode; }

  // Progresses until `done()` is true or the deadline passes; returns done().
  template <class Predicate>
  bool progress_until(Predicate&& done, clock::time_point deadline) {
    progress_mode mode = thread_mode().value_or(mode_);
    if (mode == progress_mode::block && event_fd_ < 0) mode = progress_mode::yield;
    clock::time_point idle_since{};
    int idle_polls = 0;
    for (;;) {
      if (done()) return true;
      if (progress()) {
        idle_since = {};
        continue;
      }
      if (done()) return true;
      // Reading the clock costs as much as an idle poll: spinning reads
      // it once per spin_polls_per_clock_read polls (a microsecond or so).
      if (mode == progress_mode::spin && ++idle_polls < spin_polls_per_clock_read) continue;
      idle_polls = 0;
      const auto now = clock::now();
      {
        std::lock_guard lock(mutex_);
        watch_peers(now);
      }
      if (now >= deadline) return done();
      if (idle_since == clock::time_point{}) idle_since = now;
      switch (mode) {
        case progress_mode::spin: break;
        case progress_mode::yield: std::this_thread::yield(); break;
        case progress_mode::block:
          // Yield first: under oversubscription the peer we wait for often
          // needs only our core for a moment; sleeping in the kernel right
          // away cost 8x in latency on 4 ranks over 2 cores.
          if (now - idle_since < block_after_idle) std::this_thread::yield();
          else sleep_until_event(deadline - now);
          break;
      }
    }
  }

 private:
  static constexpr auto block_after_idle = std::chrono::microseconds(200);
  static constexpr auto watch_interval = std::chrono::milliseconds(100);
  static constexpr auto abandon_budget = std::chrono::milliseconds(500);
  static constexpr int polls_per_watch = 256;
  static constexpr int spin_polls_per_clock_read = 64;

  static std::optional<progress_mode>& thread_mode() noexcept {
    thread_local std::optional<progress_mode> mode;
    return mode;
  }

  struct peer_slot {
    ucx_transport* owner = nullptr;
    int rank = -1;
    ucp_ep_h endpoint = nullptr;
    std::atomic<ucs_status_t> failure{UCS_OK};
    std::optional<transport::process_identity> process;  // watched when on this host
    std::atomic<bool> process_exited{false};
    std::atomic<int> outstanding{0};  // operations with this peer still in flight
  };

  friend class ucx::request;

  static tag_t wire_tag(int sender, tag_t tag) noexcept {
    return (static_cast<tag_t>(sender) << transport::user_tag_bits) | tag;
  }

  // Runs inside ucp_worker_progress: only records; the endpoint is closed
  // by close_failed_endpoints once progress returns.
  static void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
    auto* slot = static_cast<peer_slot*>(arg);
    mark_failed(*slot, status);
  }

  static void mark_failed(peer_slot& slot, ucs_status_t status) noexcept {
    ucs_status_t expected = UCS_OK;
    if (slot.failure.compare_exchange_strong(expected, status, std::memory_order_acq_rel))
      slot.owner->failed_peers_.fetch_add(1, std::memory_order_acq_rel);
    slot.owner->failures_pending_.store(true, std::memory_order_release);
  }

  // A failed peer with operations still in flight: they can never complete,
  // and whatever the caller waits for depends on them (a collective waits on
  // one peer while its exchange with the dead one is pending), so every wait
  // fails. A peer that finished and left has nothing in flight: no error.
  int doomed_peer() const noexcept {
    if (failed_peers_.load(std::memory_order_acquire) == 0) return -1;
    for (const auto& slot : peers_)
      if (slot->failure.load(std::memory_order_acquire) != UCS_OK &&
          slot->outstanding.load(std::memory_order_acquire) > 0)
        return slot->rank;
    return -1;
  }

  [[noreturn]] void raise_doomed(int peer, std::string_view operation) {
    note_failure();
    throw error(errc::peer_failure, "an operation with this peer can never complete: " + failure_text(peer),
                {rank_, peer, std::string(operation)});
  }

  // Whether the peer has failed, asking the kernel now if its process is
  // watched (an error status from UCX may arrive before the next watch).
  bool peer_gone(int peer) {
    peer_slot& slot = *peers_[static_cast<std::size_t>(peer)];
    check_process(slot);
    return slot.failure.load(std::memory_order_acquire) != UCS_OK;
  }

  // Marks the peer failed if its watched process is gone.
  static void check_process(peer_slot& slot) {
    if (!slot.process || slot.failure.load(std::memory_order_acquire) != UCS_OK) return;
    if (transport::process_alive(*slot.process)) return;
    slot.process_exited.store(true, std::memory_order_release);
    mark_failed(slot, UCS_ERR_CONNECTION_RESET);
  }

  // Called with mutex_ held: checks the watched processes at most once per
  // watch_interval.
  void watch_peers(clock::time_point now) {
    if (now - last_watch_ < watch_interval) return;
    last_watch_ = now;
    for (auto& slot : peers_) check_process(*slot);
    if (failures_pending_.load(std::memory_order_acquire)) close_failed_endpoints();
  }

  // Called with mutex_ held: force-closes the endpoints of failed peers, so
  // UCX completes their outstanding operations with an error now.
  void close_failed_endpoints() {
    failures_pending_.store(false, std::memory_order_release);
    for (auto& slot : peers_) {
      if (slot->endpoint == nullptr || slot->failure.load(std::memory_order_acquire) == UCS_OK) continue;
      ucp_request_param_t params{};
      params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
      params.flags = UCP_EP_CLOSE_FLAG_FORCE;
      const ucs_status_ptr_t result = ucp_ep_close_nbx(slot->endpoint, &params);
      if (UCS_PTR_IS_PTR(result)) closing_.push_back(result);
      slot->endpoint = nullptr;
    }
  }

  // The first operation that fails or times out starts the abandon budget.
  // (A peer failure alone does not: a peer that finished and left is not an
  // error until someone needs it.)
  void note_failure() noexcept {
    if (failed_.exchange(true, std::memory_order_acq_rel)) return;
    abandon_by_.store((clock::now() + abandon_budget).time_since_epoch().count(), std::memory_order_release);
  }

  std::string failure_text(int peer) const {
    const peer_slot& slot = *peers_[static_cast<std::size_t>(peer)];
    if (slot.process_exited.load(std::memory_order_acquire))
      return "its process (pid " + std::to_string(slot.process->pid) + " on this host) has exited";
    return ucs_status_string(slot.failure.load(std::memory_order_acquire));
  }

  static bool only_tcp(std::string_view list) {
    bool tcp = false;
    while (!list.empty()) {
      const std::size_t comma = std::min(list.find(','), list.size());
      const std::string_view name = list.substr(0, comma);
      if (name == "tcp") tcp = true;
      else if (name != "self") return false;
      list.remove_prefix(std::min(comma + 1, list.size()));
    }
    return tcp;
  }

  void create_context() {
    prepare_environment();
    static const bool swept = (transport::remove_orphaned_ucx_segments(), true);  // see ucx_shm_orphans.hpp
    (void)swept;
    ucp_config_t* ucx_config = nullptr;
    ucs_status_t status = ucp_config_read(nullptr, nullptr, &ucx_config);
    if (status != UCS_OK) fail_setup("ucp_config_read", status);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                        UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features = UCP_FEATURE_TAG;
    if (mode_ == progress_mode::block) params.features |= UCP_FEATURE_WAKEUP;
    params.estimated_num_eps = static_cast<std::size_t>(size_);
    params.mt_workers_shared = 0;
    status = ucp_init(&params, ucx_config, &context_);
    ucp_config_release(ucx_config);
    if (status != UCS_OK) fail_setup("ucp_init", status);
    query_memory_kinds();
  }

  void query_memory_kinds() {
    ucp_context_attr_t attributes{};
    attributes.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    memory_kinds_ = {memory_kind::host, memory_kind::cuda_pinned};
    if (ucp_context_query(context_, &attributes) == UCS_OK &&
        (attributes.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)))
      memory_kinds_.insert(memory_kind::cuda_device);
  }

  void create_worker() {
    ucp_worker_params_t params{};
    params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // Calls are serialised by mutex_, so UCX need not lock.
    params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    ucs_status_t status = ucp_worker_create(context_, &params, &worker_);
    if (status != UCS_OK) fail_setup("ucp_worker_create", status);
    status = ucp_worker_get_address(worker_, &worker_address_, &worker_address_length_);
    if (status != UCS_OK) fail_setup("ucp_worker_get_address", status);
    if (mode_ == progress_mode::block) {
      status = ucp_worker_get_efd(worker_, &event_fd_);
      if (status != UCS_OK) fail_setup("ucp_worker_get_efd", status);
    }
  }

  [[noreturn]] void fail_setup(const char* call, ucs_status_t status) {
    if (worker_address_ != nullptr) ucp_worker_release_address(worker_, worker_address_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    if (context_ != nullptr) ucp_cleanup(context_);
    worker_address_ = nullptr;
    worker_ = nullptr;
    context_ = nullptr;
    throw error(errc::transport, std::string(call) + ": " + ucs_status_string(status),
                {rank_, -1, "ucx setup"});
  }

  // Flush-closes every endpoint, waiting a bounded time: teardown must not
  // hang on a peer that left first. After any failure (a dead peer, an
  // operation that failed or timed out) every endpoint is force-closed
  // instead: a send the peer will never receive would keep a flush from
  // completing, and UCX asserts when a worker is destroyed under an endpoint
  // that still holds it.
  void close_endpoints() noexcept {
    std::vector<void*> pending;
    {
      std::lock_guard lock(mutex_);
      pending.swap(closing_);
      bool abandon = failed_.load();
      for (auto& slot : peers_) abandon = abandon || slot->failure.load() != UCS_OK;
      for (auto& slot : peers_) {
        if (slot->endpoint == nullptr) continue;
        ucp_request_param_t params{};
        params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
        params.flags = abandon ? UCP_EP_CLOSE_FLAG_FORCE : 0;
        const ucs_status_ptr_t result = ucp_ep_close_nbx(slot->endpoint, &params);
        if (UCS_PTR_IS_PTR(result)) pending.push_back(result);
        slot->endpoint = nullptr;
      }
    }
    const auto deadline = clock::now() + std::chrono::seconds(2);
    for (void* close_request : pending) {
      for (;;) {
        std::lock_guard lock(mutex_);
        ucp_worker_progress(worker_);
        if (ucp_request_check_status(close_request) != UCS_INPROGRESS || clock::now() > deadline) {
          ucp_request_free(close_request);
          break;
        }
      }
    }
  }

  request make_request(int peer, tag_t tag, bool is_receive) {
    request handle;
    handle.owner_ = this;
    handle.state_ = new detail::operation_state();
    // Counted before the UCP call: its callback may run inside it.
    handle.state_->outstanding = &peers_[static_cast<std::size_t>(peer)]->outstanding;
    handle.state_->outstanding->fetch_add(1, std::memory_order_acq_rel);
    handle.peer_ = peer;
    handle.tag_ = tag;
    handle.is_receive_ = is_receive;
    return handle;
  }

  // Records what a UCP call returned: done at once or failed at once (no
  // callback will come, so its reference is dropped here), or a request whose
  // callback fires exactly once, possibly already inside the UCP call.
  static void track(request& handle, ucs_status_ptr_t result) noexcept {
    detail::operation_state* state = handle.state_;
    if (UCS_PTR_IS_PTR(result)) {
      state->ucp_request = result;
      return;
    }
    detail::finished(state);
    state->status.store(result == nullptr ? UCS_OK : UCS_PTR_STATUS(result), std::memory_order_release);
    detail::release(state);
  }

  void check_peer(int peer, const char* operation) const {
    if (peer < 0 || peer >= size_)
      throw error(errc::invalid_argument,
                  "peer " + std::to_string(peer) + " is not in [0, " + std::to_string(size_) + ")",
                  {rank_, peer, operation});
  }

  void check_tag(tag_t tag, int peer, const char* operation) const {
    if (tag > transport::user_tag_mask)
      throw error(errc::invalid_argument, "tag does not fit in the user tag bits",
                  {rank_, peer, operation});
  }

  bool settled(std::span<request> handles) const noexcept {
    for (const request& handle : handles) {
      if (handle.done()) {
        if (!handle.succeeded()) return true;
      } else if (!peer_failure(handle.peer())) {
        return false;
      }
    }
    return true;
  }

  [[noreturn]] void raise(request& handle, std::string_view operation) {
    const bool from_peer = !handle.done() || handle.status() == UCS_ERR_CANCELED;
    const ucs_status_t status = handle.done() ? handle.status() : *peer_failure(handle.peer());
    const int peer = handle.peer();
    const bool truncated = status == UCS_ERR_MESSAGE_TRUNCATED;
    const bool gone = peer_gone(peer);
    const std::string cause = (from_peer || gone) && peer_failure(peer) ? failure_text(peer) : ucs_status_string(status);
    std::string detail = truncated ? "message is larger than the receive buffer"
                                   : std::string(handle.is_receive() ? "receive" : "send") + " failed: " + cause;
    if (!truncated) note_failure();
    handle.reset();
    // Any failure with a peer whose process is gone is that peer's failure
    // (UCX may say "Shared memory error" for a dead shared-memory peer).
    const errc category = truncated                                  ? errc::mismatch
                          : detail::is_peer_failure(status) || gone ? errc::peer_failure
                                                                    : errc::transport;
    throw error(category, detail, {rank_, peer, std::string(operation)});
  }

  // A peer that let an operation time out is treated as failed from here on:
  // its endpoint is force-closed, so a send to it that UCX cannot cancel (a
  // stopped process never fetches a rendezvous) does not hold up unwinding.
  [[noreturn]] void raise_timeout(request& handle, clock::time_point, std::string_view operation) {
    const int peer = handle.peer();
    const std::string detail = std::string(handle.is_receive() ? "receive from" : "send to") +
                               " peer did not complete before the deadline (tag 0x" +
                               to_hex(handle.tag()) + ")";
    note_failure();
    {
      std::lock_guard lock(mutex_);
      mark_failed(*peers_[static_cast<std::size_t>(peer)], UCS_ERR_ENDPOINT_TIMEOUT);
      close_failed_endpoints();
    }
    handle.reset();
    throw error(errc::timeout, detail, {rank_, peer, std::string(operation)});
  }

  static std::string to_hex(tag_t value) {
    char text[20];
    std::snprintf(text, sizeof text, "%llx", static_cast<unsigned long long>(value));
    return text;
  }

  void sleep_until_event(clock::duration remaining) {
    ucs_status_t status;
    {
      std::lock_guard lock(mutex_);
      status = ucp_worker_arm(worker_);
    }
    if (status != UCS_OK) return;  // UCS_ERR_BUSY: events are pending, progress again
    // Sleep in slices so a failed peer or a deadline is noticed even if the
    // transport that would have signalled it stays silent.
    const auto slice = std::min<clock::duration>(remaining, std::chrono::milliseconds(100));
    pollfd descriptor{event_fd_, POLLIN, 0};
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(slice).count();
    ::poll(&descriptor, 1, static_cast<int>(std::max<long long>(ms, 1)));
  }

  // Asks UCX to cancel and waits for the acknowledgement: up to a second
  // in normal operation, but after a failure only until the shared abandon
  // budget runs out. An abandoned request's state stays alive until its
  // callback (shared ownership), and the endpoints are force-closed at
  // teardown, so UCX never writes into freed request state.
  void cancel(request& handle) noexcept {
    detail::operation_state* state = handle.state_;
    {
      std::lock_guard lock(mutex_);
      if (state->status.load(std::memory_order_acquire) == UCS_INPROGRESS && state->ucp_request)
        ucp_request_cancel(worker_, state->ucp_request);
    }
    auto deadline = clock::now() + std::chrono::seconds(1);
    if (failed()) deadline = std::min(deadline, clock::time_point(clock::duration(abandon_by_.load())));
    while (state->status.load(std::memory_order_acquire) == UCS_INPROGRESS) {
      progress();
      if (clock::now() >= deadline) break;
    }
  }

  int rank_;
  int size_;
  progress_mode mode_;
  chorus::memory_kinds memory_kinds_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_address_t* worker_address_ = nullptr;
  std::size_t worker_address_length_ = 0;
  int event_fd_ = -1;
  std::vector<std::unique_ptr<peer_slot>> peers_;
  std::byte empty_{};
  std::atomic<bool> failed_{false};  // an operation failed or timed out: teardown force-closes
  std::atomic<clock::rep> abandon_by_{0};  // after a failure: when cancels stop waiting
  std::atomic<bool> failures_pending_{false};  // a failed peer's endpoint awaits its force-close
  std::atomic<int> failed_peers_{0};
  std::vector<void*> closing_;                 // force-close requests, freed at teardown
  transport::process_identity self_ = transport::process_identity::self();
  clock::time_point last_watch_{};
  int idle_polls_ = 0;
  std::mutex mutex_;
};

inline void request::reset() noexcept {
  if (state_ == nullptr) return;
  if (!done() && owner_ != nullptr) owner_->cancel(*this);
  detail::release(state_);
  state_ = nullptr;
  owner_ = nullptr;
}

static_assert(transport::Transport<ucx_transport>);

}  // namespace chorus::ucx
