// ucx_transport: the Transport concept over the UCP tag API.
//
// One UCP context and one worker per rank (ucx/context.hpp); one endpoint
// per peer this rank exchanges with (self included when it sends to
// itself), made on first use: the first send to or receive from a peer asks
// the caller's `contact_lookup` for the peer's process and worker address
// (the communicator reads them from the bootstrap: the store or PMIx),
// watches the process when it shares this host, and creates the endpoint.
// A ring therefore holds 2 endpoints and a dissemination barrier
// 2 ceil(log2 n), not n; the first exchange with a peer costs one lookup (a
// store round trip, or a local read under PMIx) and one ucp_ep_create.
// Receives make the endpoint too: it is what notices the sender's death.
// Endpoints use UCP_ERR_HANDLING_MODE_PEER, so a dead peer fails the
// operations that involve it instead of leaving them pending forever; the
// peers' failures are tracked in ucx/peers.hpp.
//
// Matching: UCP matches receives on the tag alone, not on the sender, so the
// top `rank_bits` of every wire tag carry the sender's rank and a receive from
// peer p matches only tags that p sent; a receive from any source masks
// those bits out and reads the sender from the tag that matched.
//
// Teardown after a failure is bounded: the first failure (or timeout) starts
// an `abandon_budget`; cancelling a pending request waits for UCX's
// acknowledgement only until that budget runs out, however many requests an
// unwinding collective drops, instead of up to a second each.
//
// The pieces: ucx/defaults.hpp (UCX settings chorus changes),
// ucx/request.hpp (operation state inside UCX's requests), ucx/waiting.hpp
// (spin, yield, block), ucx/errors.hpp (status to chorus::error),
// ucx/context.hpp (context and worker), ucx/peers.hpp (failure detection),
// ucx/remote_memory.hpp (regions peers reach one-sided: tensor windows).
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/core/memory_kind.hpp>
#include <chorus/transport/one_sided.hpp>
#include <chorus/transport/peer_process.hpp>
#include <chorus/transport/transport.hpp>
#include <chorus/transport/ucx/context.hpp>
#include <chorus/transport/ucx/defaults.hpp>
#include <chorus/transport/ucx/errors.hpp>
#include <chorus/transport/ucx/peers.hpp>
#include <chorus/transport/ucx/registered_kind.hpp>
#include <chorus/transport/ucx/remote_memory.hpp>
#include <chorus/transport/ucx/request.hpp>
#include <chorus/transport/ucx/waiting.hpp>

#include <ucp/api/ucp.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::ucx {

struct config {
  int rank = 0;
  int size = 1;
  progress_mode progress = progress_mode::spin;
  int capacity = 0;  // peer slots, at least size: ranks above it are processes that join later (admit)
};

// How to reach a peer: its process (watched when it shares this host) and
// its UCX worker address.
struct peer_contact {
  transport::process_identity process;
  std::string address;
};
// The contact of a peer, or nothing when the peer has none to give (a rank
// that may join later and was not admitted); may throw chorus::error (a
// lost store). Called from whichever thread first addresses the peer,
// without the transport's lock.
using contact_lookup = std::function<std::optional<peer_contact>(int peer)>;

class ucx_transport {
 public:
  using request = ucx::request;
  using exposed_memory = ucx::exposed_memory;
  using remote_memory = ucx::remote_memory;
  // Over TCP UCX emulates RMA with active messages the target's worker
  // answers (one_sided.hpp).
  static constexpr bool remote_access_needs_target_progress = true;

  explicit ucx_transport(const config& settings)
      : rank_(checked_rank(settings)),
        size_(settings.size),
        capacity_(std::max(settings.size, settings.capacity)),
        mode_(settings.progress),
        peers_(capacity_),
        context_(rank_, size_, mode_ == progress_mode::block) {}

  ucx_transport(const ucx_transport&) = delete;
  ucx_transport& operator=(const ucx_transport&) = delete;
  ~ucx_transport() { close_endpoints(); }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  // Ranks it can reach: the job's first size, then those that may join.
  int capacity() const noexcept { return capacity_; }
  progress_mode mode() const noexcept { return mode_; }
  chorus::memory_kinds memory_kinds() const noexcept { return context_.memory_kinds(); }
  // The kind UCX registers `data` as (ucx/registered_kind.hpp): a device
  // buffer it does not take for CUDA memory comes back as host memory.
  chorus::memory_kind registered_kind(const void* data, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    return registered_.of(context_.handle(), data, bytes, rank_);
  }

  // This worker's address, to be published for the peers.
  std::span<const std::byte> address() const noexcept { return context_.address(); }

  void connect(int peer, std::span<const std::byte> peer_address) {
    check_peer(peer, "connect");
    ucp_ep_params_t params{};
    params.field_mask =
        UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE | UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address = reinterpret_cast<const ucp_address_t*>(peer_address.data());
    params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
    params.err_handler.cb = &peer_table::on_endpoint_error;
    params.err_handler.arg = &peers_[peer];
    std::lock_guard lock(mutex_);
    if (peers_[peer].endpoint != nullptr) return;  // made meanwhile by another thread's first use
    ucp_ep_h endpoint = nullptr;
    const ucs_status_t status = ucp_ep_create(context_.worker(), &params, &endpoint);
    if (status != UCS_OK) {
      const std::string what = std::string("ucp_ep_create: ") + ucs_status_string(status);
      // A peer that died during start-up (its shared memory is gone): its failure.
      if (peers_.gone(peer))
        throw error(errc::peer_failure, what + ": " + peers_.failure_text(peer), {rank_, peer, "connect"});
      throw error(errc::transport, what, {rank_, peer, "connect"});
    }
    peers_[peer].endpoint = endpoint;
    peers_[peer].reached.store(true, std::memory_order_release);
    endpoints_made_.fetch_add(1, std::memory_order_relaxed);
  }

  // Where endpoints come from on first use (see the top of this file);
  // nullptr stops lookups (the bootstrap is going away): peers not reached
  // by then fail with "no endpoint".
  void look_up_contacts_with(contact_lookup lookup) {
    std::lock_guard lock(lookup_mutex_);
    lookup_ = std::move(lookup);
  }

  // Makes the endpoint to `peer` now if there is none: what the first
  // send or receive does (eager connection, CHORUS_CONNECT=eager, calls it
  // for every rank at start-up).
  void ensure_endpoint(int peer, const char* operation = "connect") {
    check_peer(peer, operation);
    if (peers_[peer].reached.load(std::memory_order_acquire) || peer_failure(peer)) return;
    std::optional<peer_contact> contact;
    {
      std::lock_guard lock(lookup_mutex_);  // one lookup at a time: the store's client is not shared between threads
      if (peers_[peer].reached.load(std::memory_order_acquire) || !lookup_) return;
      contact = lookup_(peer);
    }
    if (!contact) return;  // endpoint_of explains
    watch_process(peer, contact->process);
    connect(peer, std::as_bytes(std::span(contact->address)));
  }

  // Endpoints made so far (connect, admit and first uses; self included).
  std::size_t endpoints_made() const noexcept { return endpoints_made_.load(std::memory_order_relaxed); }

  // Watches a peer's process: if it runs on this host (same kernel and
  // namespaces), its death becomes a peer failure within the watch interval.
  void watch_process(int peer, const transport::process_identity& process) {
    check_peer(peer, "connect");
    if (peer == rank_ || process.host != self_.host || process.pid == self_.pid) return;  // threads of one process
    std::lock_guard lock(mutex_);
    peers_[peer].process = process;
  }

  // Whether an endpoint to `peer` was made (connect or admit).
  bool connected(int peer) {
    check_peer(peer, "admit");
    std::lock_guard lock(mutex_);
    return peers_[peer].endpoint != nullptr || peer == rank_;
  }

  // A process that joined the running job (rank at or above size()):
  // watched and connected like a peer of the start, from any thread, once
  // (a second admission of the same rank changes nothing).
  void admit(int peer, const transport::process_identity& process, std::span<const std::byte> peer_address) {
    {
      check_peer(peer, "admit");
      std::lock_guard lock(mutex_);
      if (peers_[peer].endpoint != nullptr) return;
    }
    watch_process(peer, process);
    connect(peer, peer_address);
  }

  // True once an operation failed or timed out: the transport is being torn
  // down, and whoever hosts shared services should not wait for its peers.
  bool failed() const noexcept { return failed_.load(std::memory_order_acquire); }

  // The job is going down for a reason above the transport (a scheme's own
  // deadline, an exception unwinding the communicator): start the abandon
  // budget, so cancels and teardown do not wait on peers that may never
  // answer (a flush to a stopped peer held teardown 2 s).
  void abandon() noexcept { note_failure(); }

  // Whether a peer has failed, asking the kernel now when its process is
  // watched: for callers that reach the peer without the network (a window
  // mapped into this process), where no operation would notice its death.
  bool peer_gone_now(int peer) {
    check_peer(peer, "watch");
    ensure_endpoint(peer, "watch");  // learns its process
    std::lock_guard lock(mutex_);
    return peers_.gone(peer);
  }

  // A failed peer (transport rank) with operations still in flight, or -1:
  // every wait on this transport then fails (wait_all), and so should a
  // wait the network does not signal (a flag in shared memory), which may
  // depend on a peer that depends on the dead one.
  int doomed_peer() const noexcept { return peers_.doomed(); }

  // The failure UCX reported for a peer's endpoint, if any (none for -1,
  // the peer of a receive from any source that has not matched).
  std::optional<ucs_status_t> peer_failure(int peer) const noexcept {
    if (peer < 0) return std::nullopt;
    return peers_.failure(peer);
  }

  // A standing send (transport.hpp, receive_kind) is one nothing else
  // depends on: its peer's death fails a wait or test on it alone.
  request isend(int peer, tag_t tag, std::span<const std::byte> data,
                transport::receive_kind kind = transport::receive_kind::awaited) {
    check_tag(tag, peer, "send");
    return outgoing(peer, tag, "send", kind == transport::receive_kind::standing,
                    [&](ucp_ep_h endpoint, ucp_request_param_t& params) {
                      return ucp_tag_send_nbx(endpoint, data.empty() ? static_cast<const void*>(&empty_) : data.data(),
                                              data.size(), wire_tag(rank_, tag), &params);
                    });
  }

  request irecv(int peer, tag_t tag, std::span<std::byte> data,
                transport::receive_kind kind = transport::receive_kind::awaited) {
    check_peer(peer, "recv");
    check_tag(tag, peer, "recv");
    reach_sender(peer, tag);
    const bool standing = kind == transport::receive_kind::standing;
    ucp_request_param_t params = operation_params(counter(peer, standing));
    // UCX 1.13 leaves recv_info empty when a receive completes inside the
    // call, so the length would be lost: always complete through the callback.
    params.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    params.cb.recv = &detail::on_recv_done;
    std::lock_guard lock(mutex_);
    request handle = start(peer, tag, true, standing);
    track(handle, ucp_tag_recv_nbx(context_.worker(), data.empty() ? static_cast<void*>(&empty_) : data.data(),
                                   data.size(), wire_tag(peer, tag), ~tag_t{0}, &params));
    return handle;
  }

  // A receive of the next message with `tag` from whichever peer sends it;
  // the request's peer() is the sender once it completed. No peer's death
  // fails it (a wait on it times out if nobody sends).
  request irecv_any(tag_t tag, std::span<std::byte> data) {
    check_tag(tag, -1, "recv");
    ucp_request_param_t params = operation_params(any_source_in_flight_);
    params.op_attr_mask |= UCP_OP_ATTR_FLAG_NO_IMM_CMPL;  // as irecv: the length and sender come with the callback
    params.cb.recv = &detail::on_recv_done;
    std::lock_guard lock(mutex_);
    request handle;
    handle.owner_ = this;
    handle.tag_ = tag;
    handle.is_receive_ = true;
    handle.settled_ = UCS_INPROGRESS;
    any_source_in_flight_.fetch_add(1, std::memory_order_acq_rel);
    track(handle, ucp_tag_recv_nbx(context_.worker(), data.empty() ? static_cast<void*>(&empty_) : data.data(),
                                   data.size(), tag, transport::user_tag_mask, &params));
    return handle;
  }

  // One-sided access (one_sided.hpp; ucx/remote_memory.hpp): a region this
  // rank exposes, a peer's region reached through its card, and the
  // operations on it.
  exposed_memory expose(std::size_t bytes) {
    std::lock_guard lock(mutex_);
    return exposed_memory::allocate(context_.handle(), bytes, rank_);
  }
  // Memory allocated elsewhere (device memory), kept alive by `owner`.
  exposed_memory expose(std::span<std::byte> memory, std::shared_ptr<void> owner) {
    std::lock_guard lock(mutex_);
    return exposed_memory::register_memory(context_.handle(), memory, std::move(owner), rank_);
  }
  remote_memory reach(int peer, std::span<const std::byte> card) {
    check_peer(peer, "window");
    ensure_endpoint(peer, "window");
    if (peer_failure(peer)) raise_gone(peer, "window");
    std::lock_guard lock(mutex_);
    return remote_memory(endpoint_of(peer, "window"), card, rank_, peer);
  }
  // After a failure a peer may still write into a region: it is unmapped
  // when the worker is gone instead.
  void retire(exposed_memory&& region) {
    std::lock_guard lock(mutex_);
    context_.retire(std::move(region));
  }

  request put(int peer, const remote_memory& to, std::size_t offset, std::span<const std::byte> data) {
    return outgoing(peer, 0, "window put", false, [&](ucp_ep_h endpoint, ucp_request_param_t& params) {
      return ucp_put_nbx(endpoint, data.data(), data.size(), to.address(offset), to.key(), &params);
    });
  }
  request get(int peer, const remote_memory& from, std::size_t offset, std::span<std::byte> out) {
    return outgoing(peer, 0, "window get", false, [&](ucp_ep_h endpoint, ucp_request_param_t& params) {
      return ucp_get_nbx(endpoint, out.data(), out.size(), from.address(offset), from.key(), &params);
    });
  }
  // Adds `value` to the 8-byte word at `offset` atomically; with `fetched`,
  // returns the word's previous value there once the request completes.
  request atomic_add(int peer, const remote_memory& to, std::size_t offset, const std::uint64_t& value,
                     std::uint64_t* fetched = nullptr) {
    return outgoing(peer, 0, "window atomic", false, [&](ucp_ep_h endpoint, ucp_request_param_t& params) {
      params.op_attr_mask |= UCP_OP_ATTR_FIELD_DATATYPE;
      params.datatype = ucp_dt_make_contig(sizeof(std::uint64_t));
      if (fetched != nullptr) {
        params.op_attr_mask |= UCP_OP_ATTR_FIELD_REPLY_BUFFER;
        params.reply_buffer = fetched;
      }
      return ucp_atomic_op_nbx(endpoint, UCP_ATOMIC_OP_ADD, &value, 1, to.address(offset), to.key(), &params);
    });
  }
  void fence() {
    std::lock_guard lock(mutex_);
    const ucs_status_t status = ucp_worker_fence(context_.worker());
    if (status != UCS_OK)
      throw error(errc::transport, std::string("ucp_worker_fence: ") + ucs_status_string(status),
                  {rank_, -1, "window fence"});
  }
  request flush(int peer) {
    return outgoing(peer, 0, "window flush", false, [&](ucp_ep_h endpoint, ucp_request_param_t& params) {
      return ucp_ep_flush_nbx(endpoint, &params);
    });
  }

  // One round of network progress; true if anything happened. Every
  // `polls_per_watch` idle rounds it reads the clock to watch the peers, so
  // a caller's own polling loop notices a dead peer too.
  bool progress() {
    std::lock_guard lock(mutex_);
    const bool moved = ucp_worker_progress(context_.worker()) != 0;
    if (!moved && ++idle_polls_ >= polls_per_watch) {
      idle_polls_ = 0;
      peers_.watch(clock::now(), [&] { drain(context_.worker()); }, closing_);
    }
    if (peers_.failures_pending()) {
      drain(context_.worker());  // what the peer sent before UCX saw it fail is still received
      peers_.close_failed_endpoints(closing_);
    }
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

  void wait_all(std::span<request> handles, clock::time_point deadline, std::string_view operation) {
    progress_until([&] { return settled(handles) || peers_.doomed() >= 0; }, deadline);
    for (request& handle : handles)
      if (handle.done() ? !handle.succeeded() : peer_failure(handle.peer()).has_value()) raise(handle, operation);
    // All done: a dead peer's operations elsewhere (a receive posted from a
    // rank that finished and left) do not fail what has completed.
    if (std::all_of(handles.begin(), handles.end(), [](const request& handle) { return handle.done(); })) return;
    if (const int doomed = peers_.doomed(); doomed >= 0) {
      note_failure();
      throw error(errc::peer_failure, "an operation with this peer can never complete: " + peers_.failure_text(doomed),
                  {rank_, doomed, std::string(operation)});
    }
    for (request& handle : handles)
      if (!handle.done()) raise_timeout(handle, operation);
  }

  // Overrides the waiting mode for the calling thread (ucx/waiting.hpp).
  // Block needs the context's wakeup support; without it, yield.
  static void set_thread_progress_mode(progress_mode mode) noexcept { thread_mode() = mode; }

  // Progresses until `done()` is true or the deadline passes; returns done().
  template <class Predicate>
  bool progress_until(Predicate&& done, clock::time_point deadline) {
    return wait_in(thread_mode().value_or(mode_), done, deadline);
  }

  // The same wait for a condition the network does not signal (a flag in
  // shared memory): a thread that would block on the network's event
  // descriptor yields instead, so the flag is seen within a time slice.
  template <class Predicate>
  bool poll_until(Predicate&& done, clock::time_point deadline) {
    const progress_mode mode = thread_mode().value_or(mode_);
    return wait_in(mode == progress_mode::block ? progress_mode::yield : mode, done, deadline);
  }

 private:
  template <class Predicate>
  bool wait_in(progress_mode mode, Predicate&& done, clock::time_point deadline) {
    if (mode == progress_mode::block && context_.event_fd() < 0) mode = progress_mode::yield;
    // While another thread here waits without spinning (the progress
    // thread, whose work a peer may be waiting for: a server's reply, a
    // window's relayed op), a spinning thread yields when idle: spinning,
    // it would keep that thread off the core for a time slice, milliseconds,
    // on a machine with no core to spare.
    if (mode == progress_mode::spin && gentle_waits_.load(std::memory_order_relaxed) > 0) mode = progress_mode::yield;
    const bool gentle = mode != progress_mode::spin;
    if (gentle) gentle_waits_.fetch_add(1, std::memory_order_relaxed);
    struct leave {
      std::atomic<int>* count;
      ~leave() {
        if (count != nullptr) count->fetch_sub(1, std::memory_order_relaxed);
      }
    } on_exit{gentle ? &gentle_waits_ : nullptr};
    const auto watch = [&](clock::time_point now) {
      std::lock_guard lock(mutex_);
      peers_.watch(now, [&] { drain(context_.worker()); }, closing_);
    };
    const auto sleep = [&](clock::duration remaining) {
      sleep_until_event(context_.worker(), context_.event_fd(), mutex_, remaining);
    };
    return wait_until(mode, done, deadline, [&] { return progress(); }, watch, sleep);
  }

  // A receive makes the endpoint too, whose error handler notices the
  // sender's death, but needs none to complete: a peer that sent and left
  // has no worker left to reach (connecting fails), and its message is here
  // already. So a message already waiting needs no endpoint, and a failed
  // connect is not the receive's failure (the peer's process, if on this
  // host, is watched from its contact all the same).
  void reach_sender(int peer, tag_t tag) {
    if (peers_[peer].reached.load(std::memory_order_acquire) ||
        peers_[peer].unreachable.load(std::memory_order_acquire))
      return;
    {
      std::lock_guard lock(mutex_);
      while (ucp_worker_progress(context_.worker()) != 0) {}  // what has arrived is matched, not still in a FIFO
      ucp_tag_recv_info_t info{};
      if (ucp_tag_probe_nb(context_.worker(), wire_tag(peer, tag), ~tag_t{0}, 0, &info) != nullptr) return;
    }
    try {
      ensure_endpoint(peer, "recv");
    } catch (const error&) {
      peers_[peer].unreachable.store(true, std::memory_order_release);  // receives stop trying; sends still do
    }
  }

  ucp_ep_h endpoint_of(int peer, const char* operation) {
    ucp_ep_h endpoint = peers_[peer].endpoint;
    if (endpoint != nullptr) return endpoint;
    if (peer_failure(peer)) raise_gone(peer, operation);  // closed by a failure noticed since the caller's check
    throw error(errc::invalid_argument, "no endpoint: the peer has no published address and was not admitted",
                {rank_, peer, operation});
  }

  // An operation this rank starts towards `peer` (a send, a put, a get, an
  // atomic, a flush): call(endpoint, params) makes the UCP call, tracked
  // with the send callback and counted in flight with the peer.
  template <class Call>
  request outgoing(int peer, tag_t tag, const char* operation, bool standing, Call&& call) {
    check_peer(peer, operation);
    ensure_endpoint(peer, operation);
    if (peer_failure(peer)) raise_gone(peer, operation);
    ucp_request_param_t params = operation_params(counter(peer, standing));
    params.cb.send = &detail::on_send_done;
    std::lock_guard lock(mutex_);
    ucp_ep_h endpoint = endpoint_of(peer, operation);
    request handle = start(peer, tag, false, standing);
    track(handle, call(endpoint, params));
    return handle;
  }

  static constexpr auto abandon_budget = std::chrono::milliseconds(500);
  static constexpr int polls_per_watch = 256;

  friend class ucx::request;

  static int checked_rank(const config& settings) {
    require(settings.size >= 1 && settings.size <= transport::max_ranks, "ucx_transport: size out of range");
    require(settings.rank >= 0 && settings.rank < settings.size, "ucx_transport: rank out of range");
    return settings.rank;
  }

  static tag_t wire_tag(int sender, tag_t tag) noexcept {
    return (static_cast<tag_t>(sender) << transport::user_tag_bits) | tag;
  }

  // The count an operation with `peer` is in flight on.
  std::atomic<int>& counter(int peer, bool standing) noexcept {
    if (peer < 0) return any_source_in_flight_;
    return standing ? peers_[peer].standing : peers_[peer].in_flight;
  }

  // The callbacks learn the operation's in-flight count through user_data.
  static ucp_request_param_t operation_params(std::atomic<int>& in_flight) noexcept {
    ucp_request_param_t params{};
    params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    params.user_data = &in_flight;
    return params;
  }

  // Counted in flight before the UCP call: its callback may run inside it.
  request start(int peer, tag_t tag, bool is_receive, bool standing) {
    request handle;
    handle.owner_ = this;
    handle.peer_ = peer;
    handle.tag_ = tag;
    handle.is_receive_ = is_receive;
    handle.standing_ = standing;
    handle.settled_ = UCS_INPROGRESS;
    counter(peer, standing).fetch_add(1, std::memory_order_acq_rel);
    return handle;
  }

  // Records what a UCP call returned: a request, whose callback fires
  // exactly once (possibly already inside the call), or an operation over
  // at once (done or failed: no callback will come).
  void track(request& handle, ucs_status_ptr_t result) noexcept {
    if (UCS_PTR_IS_PTR(result)) {
      handle.state_ = static_cast<detail::operation_state*>(result);
      return;
    }
    counter(handle.peer_, handle.standing_).fetch_sub(1, std::memory_order_acq_rel);
    handle.settled_ = result == nullptr ? UCS_OK : UCS_PTR_STATUS(result);
  }

  // The handle lets go of its request; the last one out frees it.
  void release(detail::operation_state* state) noexcept {
    if (!detail::let_go(state)) return;
    std::lock_guard lock(mutex_);
    ucp_request_free(state);
  }

  void check_peer(int peer, const char* operation) const { ucx::check_peer(rank_, capacity_, peer, operation); }
  void check_tag(tag_t tag, int peer, const char* operation) const {
    ucx::check_tag(rank_, tag, transport::user_tag_mask, peer, operation);
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

  // The first operation that fails or times out starts the abandon budget.
  // (A peer failure alone does not: a peer that finished and left is not an
  // error until someone needs it.)
  void note_failure() noexcept {
    if (failed_.exchange(true, std::memory_order_acq_rel)) return;
    abandon_by_.store((clock::now() + abandon_budget).time_since_epoch().count(), std::memory_order_release);
  }

  [[noreturn]] void raise_gone(int peer, const char* operation) {
    note_failure();
    throw error(errc::peer_failure, "peer is gone: " + peers_.failure_text(peer), {rank_, peer, operation});
  }

  [[noreturn]] void raise(request& handle, std::string_view operation) {
    const bool from_peer = !handle.done() || handle.status() == UCS_ERR_CANCELED;
    const ucs_status_t status = handle.done() ? handle.status() : *peer_failure(handle.peer());
    const int peer = handle.peer();
    const bool truncated = status == UCS_ERR_MESSAGE_TRUNCATED;
    const bool gone = peer >= 0 && peers_.gone(peer);
    const std::string cause =
        (from_peer || gone) && peer_failure(peer) ? peers_.failure_text(peer) : ucs_status_string(status);
    const std::string detail = truncated ? "message is larger than the receive buffer"
                                         : std::string(handle.is_receive() ? "receive" : "send") + " failed: " + cause;
    if (!truncated) note_failure();
    handle.reset();
    throw error(category_of(status, gone), detail, {rank_, peer, std::string(operation)});
  }

  // A peer that let an operation time out is treated as failed from here on:
  // its endpoint is force-closed, so a send to it that UCX cannot cancel (a
  // stopped process never fetches a rendezvous) does not hold up unwinding.
  [[noreturn]] void raise_timeout(request& handle, std::string_view operation) {
    const int peer = handle.peer();
    const std::string detail = std::string(handle.is_receive() ? "receive from" : "send to") +
                               " peer did not complete before the deadline (tag 0x" + to_hex(handle.tag()) + ")";
    note_failure();
    if (peer >= 0) {
      std::lock_guard lock(mutex_);
      peer_table::mark_failed(peers_[peer], UCS_ERR_ENDPOINT_TIMEOUT);
      peers_.close_failed_endpoints(closing_);
    }
    handle.reset();
    throw error(errc::timeout, detail, {rank_, peer, std::string(operation)});
  }

  // Asks UCX to cancel and waits for the acknowledgement: up to a second
  // in normal operation, but after a failure only until the shared abandon
  // budget runs out, and not at all for a failed peer's operation: its
  // endpoint is closed, and UCX never completes a receive that matched the
  // first fragments of a message whose sender died (a scheme dropping a
  // dead worker held its server 0.5 s on it). An abandoned request stays
  // UCX's until its callback (shared ownership, request.hpp), and the
  // endpoints are force-closed at teardown, so UCX never writes into a
  // request chorus has let go of; the failed peer sends nothing more.
  // Abandoned, it no longer counts in flight: nothing waits for it, and
  // UCX may never call it back (a force-closed endpoint does not always
  // complete its pending sends), which would leave every later wait
  // failing on its dead peer (peers_.doomed()).
  void cancel(request& handle) noexcept {
    {
      std::lock_guard lock(mutex_);
      if (!handle.done()) ucp_request_cancel(context_.worker(), handle.state_);
    }
    auto deadline = clock::now() + std::chrono::seconds(1);
    if (failed()) deadline = std::min(deadline, clock::time_point(clock::duration(abandon_by_.load())));
    if (peer_failure(handle.peer())) deadline = clock::now();
    wait_until(
        progress_mode::spin, [&] { return handle.done(); }, deadline, [&] { return progress(); },
        [](clock::time_point) {}, [](clock::duration) {});
    if (!handle.done() && handle.state_->counted.exchange(false, std::memory_order_acq_rel))
      counter(handle.peer_, handle.standing_).fetch_sub(1, std::memory_order_acq_rel);
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
      peers_.close_all(failed_.load() || peers_.any_failed(), pending);
    }
    finish_closing(context_.worker(), mutex_, pending, clock::now() + std::chrono::seconds(2));
  }

  int rank_;
  int size_;
  int capacity_;
  progress_mode mode_;
  // Declared before the context, so it outlives the worker: destroying the
  // worker purges the requests still pending, and their callbacks and the
  // endpoints' error handlers write into the peer table.
  peer_table peers_;
  std::atomic<int> any_source_in_flight_{0};  // receives from any source not yet over (the same reason)
  context context_;
  registered_kinds registered_;  // under mutex_
  std::byte empty_{};
  std::atomic<int> gentle_waits_{0};       // threads in a wait that does not spin (wait_in)
  std::atomic<bool> failed_{false};        // an operation failed or timed out: teardown force-closes
  std::atomic<clock::rep> abandon_by_{0};  // after a failure: when cancels stop waiting
  std::vector<void*> closing_;             // force-close requests, freed at teardown
  transport::process_identity self_ = transport::process_identity::self();
  int idle_polls_ = 0;
  std::mutex mutex_;
  std::mutex lookup_mutex_;  // held across a lookup; never while holding mutex_
  contact_lookup lookup_;
  std::atomic<std::size_t> endpoints_made_{0};
};

inline void request::reset() noexcept {
  if (state_ == nullptr) return;
  if (!done() && owner_ != nullptr) owner_->cancel(*this);
  owner_->release(std::exchange(state_, nullptr));
  owner_ = nullptr;
}

static_assert(transport::OneSided<ucx_transport>);

}  // namespace chorus::ucx
