// simgrid_transport: the Transport concept over SimGrid's S4U, so that the
// unmodified collectives run on a simulated platform (sim/ builds the
// platforms and runs the ranks: sim/run.hpp).
//
// Each rank is an S4U actor on a simulated host. A send puts the message on
// the receiver's mailbox, whose permanent receiver is that rank: the bytes
// start flowing at once (an eager protocol, as TCP and UCX's eager sends
// do), the send completes when they have crossed the simulated network, and
// the receiver matches arrived messages to its posted receives by (sender,
// tag), in order, keeping the unmatched ones. Messages leave a mailbox in
// the order they were put, so one that arrived early may wait for a slower
// one put before it to be taken; the transfers themselves overlap as the
// platform's links allow.
//
// Time: waits block the actor in simulated time (wait_any on its inbox and
// its sends), so only the network costs time; local work (reductions,
// copies, encoding) is free, and the flags of the shared-memory algorithms
// are polled every `poll_step` of simulated time. A wait's deadline is the
// communicator's, a wall-clock time point: what is left of it is spent as
// simulated time.
//
// The payload is copied, so every collective's data is real and can be
// checked against a serial reference; nothing fails or dies in a
// simulation (peer_failure is always empty).
//
// One-sided memory (transport/one_sided.hpp): an exposed region is plain
// memory of this process, found again from its card. A peer on the same
// simulated host maps it (direct()); to another host a put, an atomic or
// a get's request is a simulated transfer between the two hosts (SimGrid's
// host-to-host Comm: no actor receives it), whose effect lands in the
// region when it has crossed and every earlier operation to that peer has
// landed (so each peer sees this rank's operations in order: fence() has
// nothing to add); a get's or a fetching atomic's answer crosses back as a
// second transfer. The initiator's waits apply them: the target's actor
// does nothing, so no relay and no progress thread is needed.
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/core/memory_kind.hpp>
#include <chorus/transport/one_sided.hpp>
#include <chorus/transport/transport.hpp>

#include <simgrid/s4u.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::sim {

using transport::clock;
using transport::tag_t;

// What crosses a simulated link: the bytes and their envelope.
struct message {
  int source = -1;
  tag_t tag = 0;
  std::vector<std::byte> data;
};

// One operation: a send (its comm) or a receive (its buffer, then what came).
struct operation {
  bool receive = false;
  bool done = false;
  bool truncated = false;
  int peer = -1;  // -1: a receive from any source, until it matched
  tag_t tag = 0;
  std::span<std::byte> into;
  std::size_t received = 0;
  simgrid::s4u::CommPtr comm;  // a send's transfer
};

// Memory a rank exposed: allocated here, or the caller's kept alive by its
// owner. Shared by the region's reachers, so a peer that still writes after
// the owner let go (a failure) writes into live memory.
struct exposed_bytes {
  std::unique_ptr<std::uint64_t[]> allocated;  // 8-byte aligned: the windows' counters are atomics
  std::span<std::byte> bytes;
  std::shared_ptr<void> owner;
};

// The process's exposed regions by address (every simulated rank is an
// actor of this process): what a card names.
class exposed_table {
 public:
  static exposed_table& instance() {
    static exposed_table table;
    return table;
  }
  void add(const std::shared_ptr<exposed_bytes>& region) {
    std::lock_guard lock(mutex_);
    regions_[address_of(*region)] = region;
  }
  std::shared_ptr<exposed_bytes> find(std::uint64_t address) {
    std::lock_guard lock(mutex_);
    const auto found = regions_.find(address);
    if (found == regions_.end()) return nullptr;
    std::shared_ptr<exposed_bytes> region = found->second.lock();
    if (!region) regions_.erase(found);
    return region;
  }
  static std::uint64_t address_of(const exposed_bytes& region) {
    return reinterpret_cast<std::uint64_t>(region.bytes.data());
  }

 private:
  std::mutex mutex_;
  std::map<std::uint64_t, std::weak_ptr<exposed_bytes>> regions_;
};

// A region this rank exposes (one_sided.hpp).
class exposed_region {
 public:
  exposed_region() = default;
  explicit exposed_region(std::shared_ptr<exposed_bytes> region) : region_(std::move(region)) {
    exposed_table::instance().add(region_);
  }
  std::byte* data() const noexcept { return region_ ? region_->bytes.data() : nullptr; }
  std::size_t size() const noexcept { return region_ ? region_->bytes.size() : 0; }
  // Its address and size, which a peer looks up (exposed_table).
  std::vector<std::byte> card() const {
    const std::uint64_t fields[2] = {region_ ? exposed_table::address_of(*region_) : 0, size()};
    const auto bytes = std::as_bytes(std::span(fields));
    return {bytes.begin(), bytes.end()};
  }
  void release() noexcept { region_.reset(); }

 private:
  std::shared_ptr<exposed_bytes> region_;
};

// A peer's region as this rank reaches it.
struct reached_region {
  std::shared_ptr<exposed_bytes> region;
  simgrid::s4u::Host* host = nullptr;  // the peer's
  bool mapped = false;                 // the peer shares this rank's host
  std::byte* direct() const noexcept { return mapped ? region->bytes.data() : nullptr; }
};

// A one-sided operation on its way to its target, and what it does there.
struct remote_operation {
  std::shared_ptr<operation> state;           // what the caller's request sees
  simgrid::s4u::CommPtr comm;                 // the transfer to the target; null once it crossed (or for a flush)
  std::function<void()> land;                 // its effect at the target
  std::size_t answer_bytes = 0;               // a get's or fetching atomic's answer, sent back once it landed
  simgrid::s4u::Host* answer_from = nullptr;  // the target's host, when the answer crosses the network
};

class simgrid_transport {
 public:
  class request {
   public:
    request() = default;
    bool done() const noexcept { return !state_ || state_->done; }  // one never started is done, as UCX's
    int peer() const noexcept { return state_ ? state_->peer : -1; }
    std::size_t received_bytes() const noexcept { return state_ ? state_->received : 0; }

   private:
    friend class simgrid_transport;
    explicit request(std::shared_ptr<operation> state) : state_(std::move(state)) {}
    std::shared_ptr<operation> state_;
  };

  using exposed_memory = exposed_region;
  using remote_memory = reached_region;
  // The initiator's waits apply its operations (the header).
  static constexpr bool remote_access_needs_target_progress = false;

  // Simulated time between two looks at a shared-memory flag.
  static constexpr double poll_step = 1e-6;
  // Every simulated rank is an actor of this process: a host's shared
  // memory is made here (transport/shared_segment.hpp).
  static constexpr bool ranks_in_one_process = true;

  // `mailboxes`: every rank's inbox, this rank's among them; `hosts`:
  // every rank's host (tables shared by all ranks).
  simgrid_transport(int rank, std::shared_ptr<const std::vector<simgrid::s4u::Mailbox*>> mailboxes,
                    std::shared_ptr<const std::vector<simgrid::s4u::Host*>> hosts)
      : rank_(rank), inboxes_(std::move(mailboxes)), hosts_(std::move(hosts)) {
    inbox().set_receiver(simgrid::s4u::Actor::self());
    post_get();
  }
  simgrid_transport(const simgrid_transport&) = delete;
  simgrid_transport& operator=(const simgrid_transport&) = delete;
  ~simgrid_transport() {
    if (get_) get_->cancel();
    delete arriving_;
    inbox().set_receiver(nullptr);
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(inboxes_->size()); }
  chorus::memory_kinds memory_kinds() const noexcept { return chorus::memory_kinds{memory_kind::host}; }
  chorus::memory_kind registered_kind(const void*, std::size_t) const noexcept { return memory_kind::host; }
  std::optional<int> peer_failure(int) const noexcept { return std::nullopt; }
  bool peer_gone_now(int) const noexcept { return false; }
  bool failed() const noexcept { return failed_; }
  void abandon() noexcept { failed_ = true; }
  static void set_thread_progress_mode(transport::progress_mode) noexcept {}

  // Messages and bytes this rank sent.
  std::size_t messages_sent() const noexcept { return messages_sent_; }
  std::size_t bytes_sent() const noexcept { return bytes_sent_; }

  request isend(int peer, tag_t tag, std::span<const std::byte> data,
                transport::receive_kind = transport::receive_kind::awaited) {
    check_peer(peer, "send");
    auto state = std::make_shared<operation>();
    state->peer = peer;
    state->tag = tag;
    auto* sent = new message{rank_, tag, std::vector<std::byte>(data.begin(), data.end())};
    state->comm = (*inboxes_)[static_cast<std::size_t>(peer)]->put_async(sent, data.size());
    sends_.push_back(state);
    ++messages_sent_;
    bytes_sent_ += data.size();
    return request(std::move(state));
  }

  request irecv(int peer, tag_t tag, std::span<std::byte> data,
                transport::receive_kind = transport::receive_kind::awaited) {
    check_peer(peer, "recv");
    return post_receive(peer, tag, data);
  }
  request irecv_any(tag_t tag, std::span<std::byte> data) { return post_receive(-1, tag, data); }

  // One-sided access (one_sided.hpp; the header says how it is simulated).
  exposed_region expose(std::size_t bytes) {
    auto region = std::make_shared<exposed_bytes>();
    const std::size_t words = (std::max<std::size_t>(bytes, 1) + 7) / 8;
    region->allocated = std::make_unique<std::uint64_t[]>(words);  // zeroed
    region->bytes = std::span(reinterpret_cast<std::byte*>(region->allocated.get()), bytes);
    return exposed_region(std::move(region));
  }
  exposed_region expose(std::span<std::byte> memory, std::shared_ptr<void> owner) {
    return exposed_region(std::make_shared<exposed_bytes>(exposed_bytes{nullptr, memory, std::move(owner)}));
  }
  reached_region reach(int peer, std::span<const std::byte> card) {
    check_peer(peer, "window");
    std::uint64_t fields[2] = {};
    if (card.size() != sizeof fields)
      throw error(errc::mismatch, std::string("a window card of ") + std::to_string(card.size()) + " bytes",
                  {rank_, peer, "window"});
    std::memcpy(fields, card.data(), sizeof fields);
    reached_region theirs{exposed_table::instance().find(fields[0]), host_of(peer)};
    if (!theirs.region || theirs.region->bytes.size() != fields[1])
      throw error(errc::mismatch, "a window card for memory that is not exposed", {rank_, peer, "window"});
    theirs.mapped = theirs.host == host_of(rank_);
    return theirs;
  }
  // The region's memory lives while a peer reaches it (exposed_bytes).
  void retire(exposed_region&& region) { region.release(); }

  request put(int peer, const reached_region& to, std::size_t offset, std::span<const std::byte> data) {
    check_range(to, offset, data.size(), peer, "window put");
    auto copied = std::make_shared<std::vector<std::byte>>(data.begin(), data.end());
    std::byte* at = to.region->bytes.data() + offset;
    bytes_sent_ += data.size();
    return send_remote(peer, to, data.size(), [at, copied] {
      if (!copied->empty()) std::memcpy(at, copied->data(), copied->size());
    });
  }
  request get(int peer, const reached_region& from, std::size_t offset, std::span<std::byte> out) {
    check_range(from, offset, out.size(), peer, "window get");
    const std::byte* at = from.region->bytes.data() + offset;
    return send_remote(
        peer, from, 0,
        [at, out] {
          if (!out.empty()) std::memcpy(out.data(), at, out.size());
        },
        out.size());
  }
  request atomic_add(int peer, const reached_region& to, std::size_t offset, const std::uint64_t& value,
                     std::uint64_t* fetched = nullptr) {
    check_range(to, offset, sizeof(std::uint64_t), peer, "window atomic");
    if (offset % alignof(std::uint64_t) != 0)
      throw error(errc::invalid_argument,
                  std::string("an atomic at offset ") + std::to_string(offset) + ", not 8-byte aligned",
                  {rank_, peer, "window atomic"});
    auto* word = reinterpret_cast<std::uint64_t*>(to.region->bytes.data() + offset);
    const auto land = [word, add = value, fetched] {
      const std::uint64_t before = std::atomic_ref(*word).fetch_add(add, std::memory_order_acq_rel);
      if (fetched != nullptr) *fetched = before;
    };
    return send_remote(peer, to, sizeof value, land, fetched != nullptr ? sizeof value : 0);
  }
  void fence() noexcept {}  // every peer sees this rank's operations in order already
  request flush(int peer) {
    check_peer(peer, "window flush");
    auto state = std::make_shared<operation>();
    state->peer = peer;
    remote_[peer].push_back(remote_operation{state, nullptr, [] {}});
    return request(std::move(state));
  }

  // What the communicator's progress thread does, called from every wait
  // (comm/progress_thread.hpp: a thread beside a coroutine rank would race
  // the simulation); null: nothing.
  void poll_in_waits(std::function<bool()> work) { in_waits_ = std::move(work); }

  // Takes what arrived, settles finished sends, lands one-sided operations
  // and runs the progress thread's pollers; true if anything happened.
  bool progress() {
    bool moved = land_remote();
    while (get_ && get_->test()) {
      moved = true;
      get_ = nullptr;
      std::unique_ptr<message> arrived(std::exchange(arriving_, nullptr));
      deliver(std::move(*arrived));
      post_get();
    }
    for (auto at = sends_.begin(); at != sends_.end();) {
      if ((*at)->comm->test()) {
        (*at)->done = true;
        (*at)->comm = nullptr;
        at = sends_.erase(at);
        moved = true;
      } else {
        ++at;
      }
    }
    if (in_waits_) moved = in_waits_() || moved;
    return moved;
  }

  bool test(request& handle) {
    progress();
    check(handle, "test");
    return handle.done();
  }
  void wait(request& handle, clock::time_point deadline, std::string_view operation) {
    wait_all(std::span<request>(&handle, 1), deadline, operation);
  }
  void wait_all(std::span<request> handles, clock::time_point deadline, std::string_view operation) {
    const auto all_done = [&] {
      return std::all_of(handles.begin(), handles.end(), [](const request& handle) { return handle.done(); });
    };
    const bool finished = progress_until(all_done, deadline);
    for (request& handle : handles) check(handle, operation);
    if (finished) return;
    for (request& handle : handles)
      if (!handle.done()) {
        failed_ = true;
        throw error(errc::timeout,
                    std::string(handle.state_->receive ? "receive from" : "send to") +
                        " peer did not complete before the deadline (simulated time " +
                        std::to_string(simgrid::s4u::Engine::get_clock()) + " s)",
                    {rank_, handle.peer(), std::string(operation)});
      }
  }

  // Blocks in simulated time until done() or what is left of the deadline
  // has passed in simulated time.
  template <class Predicate>
  bool progress_until(Predicate&& done, clock::time_point deadline) {
    const double give_up = simgrid::s4u::Engine::get_clock() + seconds_left(deadline);
    for (;;) {
      progress();
      if (done()) return true;
      const double left = give_up - simgrid::s4u::Engine::get_clock();
      if (left <= 0) return false;
      std::vector<simgrid::s4u::CommPtr> pending;
      if (get_) pending.push_back(get_);
      for (const auto& send : sends_) pending.push_back(send->comm);
      for (const auto& [peer, queue] : remote_)
        for (const remote_operation& on_its_way : queue)
          if (on_its_way.comm) pending.push_back(on_its_way.comm);
      if (pending.empty()) {
        simgrid::s4u::this_actor::sleep_for(std::min(left, poll_step));  // a condition nothing here signals
        continue;
      }
      simgrid::s4u::Comm::wait_any_for(pending, left);
    }
  }

  // A flag in memory another rank writes: looked at every poll_step.
  template <class Predicate>
  bool poll_until(Predicate&& done, clock::time_point deadline) {
    const double give_up = simgrid::s4u::Engine::get_clock() + seconds_left(deadline);
    for (;;) {
      progress();
      if (done()) return true;
      if (simgrid::s4u::Engine::get_clock() >= give_up) return false;
      simgrid::s4u::this_actor::sleep_for(poll_step);
    }
  }

 private:
  static double seconds_left(clock::time_point deadline) {
    return std::max(0.0, std::chrono::duration<double>(deadline - clock::now()).count());
  }

  simgrid::s4u::Mailbox& inbox() const { return *(*inboxes_)[static_cast<std::size_t>(rank_)]; }

  simgrid::s4u::Host* host_of(int rank) const { return (*hosts_)[static_cast<std::size_t>(rank)]; }

  void check_range(const reached_region& region, std::size_t offset, std::size_t bytes, int peer,
                   const char* operation) const {
    check_peer(peer, operation);
    if (!region.region || offset > region.region->bytes.size() || bytes > region.region->bytes.size() - offset)
      throw error(errc::invalid_argument,
                  std::to_string(bytes) + " bytes at offset " + std::to_string(offset) + " of a region of " +
                      std::to_string(region.region ? region.region->bytes.size() : 0),
                  {rank_, peer, operation});
  }

  // Starts `bytes` towards the peer's host; `land` runs when they crossed
  // and every earlier operation to the peer landed, then `answer` bytes
  // come back before the request completes.
  request send_remote(int peer, const reached_region& to, std::size_t bytes, std::function<void()> land,
                      std::size_t answer = 0) {
    auto state = std::make_shared<operation>();
    state->peer = peer;
    remote_operation started{state, nullptr, std::move(land), answer};
    if (!to.mapped) {
      started.comm = simgrid::s4u::Comm::sendto_async(host_of(rank_), to.host, bytes);
      if (answer > 0) started.answer_from = to.host;
    }
    remote_[peer].push_back(std::move(started));
    ++messages_sent_;
    return request(std::move(state));
  }

  // Lands, in order per peer, the one-sided operations that crossed;
  // starts their answers (settled with the sends).
  bool land_remote() {
    bool moved = false;
    for (auto& [peer_rank, queue] : remote_) {
      for (remote_operation& on_its_way : queue)
        if (on_its_way.comm && on_its_way.comm->test()) on_its_way.comm = nullptr;
      while (!queue.empty() && !queue.front().comm) {
        remote_operation landed = std::move(queue.front());
        queue.pop_front();
        landed.land();
        moved = true;
        if (landed.answer_from == nullptr) {
          landed.state->done = true;
          continue;
        }
        landed.state->comm = simgrid::s4u::Comm::sendto_async(landed.answer_from, host_of(rank_), landed.answer_bytes);
        sends_.push_back(landed.state);
      }
    }
    return moved;
  }

  void post_get() { get_ = inbox().get_async<message>(&arriving_); }

  void check_peer(int peer, const char* operation) const {
    if (peer < 0 || peer >= size())
      throw error(errc::invalid_argument,
                  "peer " + std::to_string(peer) + " is not in [0, " + std::to_string(size()) + ")",
                  {rank_, peer, operation});
  }

  void check(const request& handle, std::string_view operation) {
    if (handle.state_ && handle.state_->truncated) {
      failed_ = true;
      throw error(errc::mismatch, "message is larger than the receive buffer",
                  {rank_, handle.peer(), std::string(operation)});
    }
  }

  request post_receive(int peer, tag_t tag, std::span<std::byte> into) {
    auto state = std::make_shared<operation>();
    state->receive = true;
    state->peer = peer;
    state->tag = tag;
    state->into = into;
    progress();
    for (auto at = unexpected_.begin(); at != unexpected_.end(); ++at)
      if (matches(*state, *at)) {
        settle(*state, std::move(*at));
        unexpected_.erase(at);
        return request(std::move(state));
      }
    posted_.push_back(state);
    return request(std::move(state));
  }

  static bool matches(const operation& wanted, const message& arrived) noexcept {
    return (wanted.peer < 0 || wanted.peer == arrived.source) && wanted.tag == arrived.tag;
  }

  static void settle(operation& receive, message&& arrived) {
    receive.peer = arrived.source;
    receive.received = std::min(arrived.data.size(), receive.into.size());
    receive.truncated = arrived.data.size() > receive.into.size();
    if (receive.received > 0) std::memcpy(receive.into.data(), arrived.data.data(), receive.received);
    receive.done = true;
  }

  // The first posted receive it matches, in posting order; else kept.
  void deliver(message&& arrived) {
    for (auto at = posted_.begin(); at != posted_.end(); ++at)
      if (matches(**at, arrived)) {
        settle(**at, std::move(arrived));
        posted_.erase(at);
        return;
      }
    unexpected_.push_back(std::move(arrived));
  }

  int rank_;
  std::shared_ptr<const std::vector<simgrid::s4u::Mailbox*>> inboxes_;
  simgrid::s4u::CommPtr get_;
  message* arriving_ = nullptr;  // where the inbox's get puts what it takes
  std::deque<std::shared_ptr<operation>> posted_;
  std::deque<message> unexpected_;
  std::vector<std::shared_ptr<operation>> sends_;
  std::shared_ptr<const std::vector<simgrid::s4u::Host*>> hosts_;
  std::map<int, std::deque<remote_operation>> remote_;  // by peer, in the order started
  std::function<bool()> in_waits_;
  std::size_t messages_sent_ = 0, bytes_sent_ = 0;
  bool failed_ = false;
};

static_assert(transport::OneSided<simgrid_transport>);

}  // namespace chorus::sim
