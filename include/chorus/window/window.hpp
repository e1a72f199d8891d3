// window: one-sided tensor windows. Each rank exposes one slot per
// in-neighbour (a source: a rank that writes to it) and a published copy of
// its own tensor; a rank writes into its out-neighbours' (targets') slots
// and reads its sources' published tensors without their help.
//
//   chorus::window win(comm, model, {.sources = {left, right}});  // collective
//   win.put(model);                          // model into each target's slot
//   win.accumulate(delta, {{target, 0.5}});  // adds 0.5 * delta into one
//   win.update(model, 1.0 / 3, {});          // model = model/3 + slots/3 each
//   win.get();                               // the sources' published tensors
//   win.wait_versions(1);                    // a new entry from every source
//   win.in_quiesce(target);                  // whether it waits in quiesce()
//   win.ready(target);                       // whether a write to it goes out now
//   win.free();                              // collective
//
// Semantics (docs/windows.md): slot (t, s) on rank t is written by s alone;
// a put replaces its value, an accumulate adds to it, each weighted by the
// window's p times the target's weight (push-sum). Reads happen at update(),
// collect() and get() on the reader's thread and never see a torn tensor
// (slot.hpp). A put never waits for its target; an accumulate whose target
// has not applied the one two before it is summed here and written when
// there is room (or at quiesce()), so a slow link carries sums at its pace.
//
// Elements are float, a flat vector. The window's communicator is split off
// the one it is given; its memory is exposed through the transport's
// one-sided concept (transport/one_sided.hpp), keys exchanged at creation.
// Peers on this host are reached by loads and stores into mapped memory,
// others by messages the owner's progress thread applies (relay.hpp; UCX
// RMA with CHORUS_WINDOW_NETWORK=rma), or by one-sided operations where the
// transport needs no help from the target (the simulated one). Cost: a put
// writes one entry (header + encoded tensor) per target; a read copies at
// most two entries per source; memory: 2 entries per source and 2 for the
// published tensor, a decoded view per source, a pending tensor per target.
//
// Non-blocking forms return a window_request (request.hpp): a write runs on
// the caller's thread and completes once sent; a get or an update runs on
// the background thread, and the window's next call waits for it (calls
// complete in the order made). Threads: one thread uses a window, except
// that publish() and set_p() may come from a second while the first only
// reads (a server publishing on its progress thread: parameter_server's
// fetch_by_get). Failure: an operation on a dead peer raises peer_failure;
// drop(rank) forgets it; every wait is bounded by the timeout.
//
// Device slots (docs/windows.md, "Slots in device memory"): over device
// memory on the direct path, the payloads live in device memory
// (device_region.hpp), written by RMA and flushed before the counter that
// makes them visible, and encoded, decoded and combined on the device;
// counters and headers stay on the host. Elsewhere device tensors are
// staged through host slots, and the debug report says why.
#pragma once

#include <chorus/codec/any_codec.hpp>
#include <chorus/codec/any_error_feedback.hpp>
#include <chorus/codec/spec.hpp>
#include <chorus/comm/progress_thread.hpp>
#include <chorus/comm/tag.hpp>
#include <chorus/comm/traffic.hpp>
#include <chorus/core/error.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>
#include <chorus/window/call_order.hpp>
#include <chorus/window/device_region.hpp>
#include <chorus/window/exposure.hpp>
#include <chorus/window/graph.hpp>
#include <chorus/window/neighbour_links.hpp>
#include <chorus/window/peer_region.hpp>
#include <chorus/window/relay.hpp>
#include <chorus/window/request.hpp>
#include <chorus/window/slot.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace chorus {

// A neighbour and the weight an operation gives it.
struct neighbour_weight {
  int rank = -1;
  double weight = 1.0;
};

struct window_options {
  // In-neighbours: the ranks that write into this rank's slots (and whose
  // published tensors get() reads). Default: every other rank. Out-neighbours
  // follow: the ranks that list this one.
  std::optional<std::vector<int>> sources{};
  codec::any_codec codec{};    // on puts and accumulates; none: float
  bool error_feedback = true;  // with a lossy codec: a residual per target
  // A neighbour found dead is dropped and the operation goes on with the
  // others (dropped() lists them), instead of a peer_failure error.
  bool drop_dead_peers = false;
  // Every entry is read, in order: a writer writes entry k only once its
  // target has applied entry k - 1, keeping later ones queued here (rounds
  // of a synchronous scheme on a window: D-PSGD). Unordered, a put
  // supersedes what the target has not read.
  bool ordered = false;
};

template <class Communicator>
class window {
  using transport_type = typename Communicator::transport_type;
  using region = windows::peer_region<transport_type>;

 public:
  // Collective: every rank of `comm` passes `initial` of the same size (it
  // is published at once) and options that agree (sources and targets).
  window(Communicator& comm, std::span<const float> initial, window_options options = {})
      : comm_(comm.split(0, comm.rank())),
        elements_(initial.size()),
        codec_(std::move(options.codec)),
        slot_{codec_.encoded_bytes(elements_)},
        published_{elements_ * sizeof(float)},
        links_(comm_, options.drop_dead_peers),
        ordered_(options.ordered) {
    agree_on_graph(options.sources, options.error_feedback, device_slots_path(initial));
    expose(initial);
    listen_for_quiesce();
  }

  window(const window&) = delete;
  window& operator=(const window&) = delete;
  ~window() {
    calls_.finish();
    *alive_ = nullptr;
    if (!freed_) retire();
  }

  std::size_t size() const noexcept { return elements_; }
  const Communicator& communicator() const noexcept { return comm_; }
  std::vector<int> sources() const { return ranks_of(sources_); }
  std::vector<int> targets() const { return ranks_of(targets_); }

  // The weight that travels with puts and accumulates (push-sum's p); 1 at
  // creation.
  double p() const noexcept { return p_; }
  void set_p(double p) noexcept { p_ = p; }

  // Writes weight * values into each target's slot (replacing what it
  // holds), every target with weight 1 when `to` is empty.
  void put(std::span<const float> values, const std::vector<neighbour_weight>& to = {}) {
    const record::recorded_call recorded(record::recorder_of(comm_), record::window_call("put", values.size()));
    in_order();
    write_to_targets(windows::entry_kind::put, values, to, link_busy::wait);
    wait_written();
  }
  // Adds weight * values to each target's slot.
  void accumulate(std::span<const float> values, const std::vector<neighbour_weight>& to = {}) {
    const record::recorded_call recorded(record::recorder_of(comm_), record::window_call("accumulate", values.size()));
    in_order();
    write_to_targets(windows::entry_kind::accumulate, values, to, link_busy::wait);
    wait_written();
  }
  // The same, returning before the bytes on their way over the network are
  // sent: values may change at once. The request completes once they are
  // sent and, for an accumulate kept pending, written (its target read
  // enough to make room).
  window_request put_nonblocking(std::span<const float> values, const std::vector<neighbour_weight>& to = {}) {
    const record::recorded_call recorded(record::recorder_of(comm_),
                                         record::window_call("put_nonblocking", values.size()));
    in_order();
    write_to_targets(windows::entry_kind::put, values, to, link_busy::keep_pending);
    return sent_request();
  }
  window_request accumulate_nonblocking(std::span<const float> values, const std::vector<neighbour_weight>& to = {}) {
    const record::recorded_call recorded(record::recorder_of(comm_),
                                         record::window_call("accumulate_nonblocking", values.size()));
    in_order();
    write_to_targets(windows::entry_kind::accumulate, values, to, link_busy::keep_pending);
    return sent_request();
  }
  // Whether everything written so far has been sent (and pending sums written).
  bool test() {
    in_order();
    return sent();
  }

  // Replaces this rank's published tensor (what the ranks it is a source of
  // read with get()), with p.
  void publish(std::span<const float> given) {  // no in_order(): see "Threads"
    require_size(given.size(), "publish");
    if (device_) return publish_device(given);
    on_host(given, buffer_use::read, [&](std::span<const float> values) { publish_host(values); });
  }

  // Reads each source's published tensor into its slot's value, times its
  // weight (every source with weight 1 when `from` is empty).
  void get(const std::vector<neighbour_weight>& from = {}) {
    const record::recorded_call recorded(record::recorder_of(comm_), record::window_call("get", 0));
    in_order();
    get_now(from);
  }
  // The same on the background thread.
  window_request get_nonblocking(std::vector<neighbour_weight> from = {}) {
    in_order();
    return in_background([this, from = std::move(from)] { get_now(from); });
  }

  // out = (out + the sum of the sources' values) / (sources + 1), and p
  // likewise: uniform weights.
  void update(std::span<float> out, bool reset = false) {
    const record::recorded_call recorded(record::recorder_of(comm_), record::window_call("update", out.size()));
    in_order();
    require_size(out.size(), "update");
    update_now(out, std::nullopt, {}, reset);
  }

  // out = self_weight * out + sum_s weight_s * value_s over the sources in
  // `from` (the others weigh 0), and p likewise. With reset every slot's
  // value (and p) becomes 0 afterwards.
  void update(std::span<float> out, double self_weight, const std::vector<neighbour_weight>& from, bool reset = false) {
    const record::recorded_call recorded(record::recorder_of(comm_), record::window_call("update", out.size()));
    in_order();
    require_size(out.size(), "update");
    update_now(out, self_weight, from, reset);
  }

  // The same on the background thread: `out` stays untouched until the
  // request completes.
  window_request update_nonblocking(std::span<float> out, bool reset = false) {
    in_order();
    require_size(out.size(), "update");
    return in_background([this, out, reset] { update_now(out, std::nullopt, {}, reset); });
  }
  window_request update_nonblocking(std::span<float> out, double self_weight, std::vector<neighbour_weight> from,
                                    bool reset = false) {
    in_order();
    require_size(out.size(), "update");
    return in_background(
        [this, out, self_weight, from = std::move(from), reset] { update_now(out, self_weight, from, reset); });
  }

  // on_slot(source, value, p) for every live source after reading what
  // landed; with reset the values (and p's) become 0 afterwards.
  template <class OnSlot>
  void collect(OnSlot&& on_slot, bool reset = false) {
    in_order();
    collect_now(on_slot, reset);
  }

  // The same for the sources named (in their order) alone: the others'
  // slots are left unread (a synchronous round reads only its senders).
  template <class OnSlot>
  void collect_from(std::span<const int> from, OnSlot&& on_slot, bool reset = false) {
    in_order();
    in_device_pass([&] { collect_from_now(from, on_slot, reset); });
  }

  // Entries landed in `source`'s slot since the last update() or collect()
  // (gets count one each).
  std::uint64_t version(int source) const {
    in_order();
    const source_state& state = source_named(source, "version");
    return completed(state) - state.seen + state.gets;
  }

  // Waits until every source in `from` (all live sources when empty) has
  // at least `count` new versions; bounded by the communicator's timeout.
  // A source that dies meanwhile is a peer failure (or dropped).
  void wait_versions(std::uint64_t count, std::span<const int> from = {}) {
    in_order();
    std::vector<int> watched(from.begin(), from.end());
    if (from.empty()) watched = ranks_of(sources_);
    for (int rank : watched) (void)source_named(rank, "wait_versions");
    const auto enough = [&] {
      write_pending();
      bool all = true;
      for (int rank : watched) {
        source_state& source = named(sources_, rank, "a source", "wait_versions");
        if (links_.lost(rank)) continue;
        const bool dead = links_.gone(rank);  // first: a relay settles after applying all it had
        if (completed(source) - source.seen + source.gets >= count) continue;
        guarded([&] {
          if (dead) gone(rank, "window wait_versions");
        });
        all &= links_.lost(rank);
      }
      return all;
    };
    comm_.poll_until(enough, "window wait_versions");
  }

  // Waits until no entry is kept pending here: each target has read enough
  // to make room for it (an ordered window's round before the next).
  // Bounded by the timeout; the targets must be reading meanwhile.
  void wait_pending() {
    in_order();
    const auto written = [&] {
      write_pending();
      return std::none_of(targets_.begin(), targets_.end(), [&](const target_state& t) { return has_pending(t); });
    };
    comm_.poll_until(written, "window wait_pending (a target does not read its slot)");
  }

  // Whether every target has read every entry written to it so far (the
  // pending ones are written first): a writer's "all taken" before it says
  // so on another channel (parameter_server's goodbye after accumulates).
  bool read_by_targets() {
    in_order();
    write_pending();
    bool all = true;
    each_live(targets_,
              [&](target_state& target) { all &= !has_pending(target) && consumed_at_least(target, target.written); });
    return all;
  }

  // Waits until every entry written so far has landed at its target (not
  // the pending sums: they wait for their targets to read; see quiesce()).
  void flush() {
    const record::recorded_call recorded(record::recorder_of(comm_), record::window_call("flush", 0));
    in_order();
    each_live(targets_, [&](target_state& target) {
      link(target.rank).flush(comm_.deadline());
      if (device_) device_->link(target.rank).flush(comm_.deadline());
    });
  }

  // Collective over the window's ranks: returns once every put and
  // accumulate any rank made before its quiesce() has landed and been read
  // into this rank's slot values. Each rank tells its sources it is in
  // quiesce() (in_quiesce()), writes its pending sums (reading its own
  // slots meanwhile, so that ranks writing to each other make room for each
  // other), flushes, and tells its targets it is drained; it reads until
  // every source has said so, and until every target has said it is in
  // quiesce() too. A tag message may overtake RMA, hence the flush before
  // the drained mark.
  void quiesce() {
    const record::recorded_call recorded(record::recorder_of(comm_), record::window_call("quiesce", 0));
    in_order();
    each_live(sources_, [&](source_state& source) {
      source.quiescing = comm_.isend_bytes({}, source.rank, comm_.wire_tag(quiesce_notice_, 0));
    });
    const std::uint32_t sequence = comm_.next_sequence();
    each_live(sources_, [&](source_state& source) {
      source.drained = comm_.irecv_bytes({}, source.rank, comm_.wire_tag(sequence, 0));
    });
    const auto read_all = [&] { each_live(sources_, [&](source_state& source) { read_new(source); }); };
    const auto written = [&] {
      write_pending();
      read_all();
      return std::none_of(targets_.begin(), targets_.end(), [&](const target_state& t) { return has_pending(t); });
    };
    comm_.poll_until(written, "window quiesce (a target is not in quiesce())");
    flush();
    each_live(targets_, [&](target_state& target) {
      target.drained = comm_.isend_bytes({}, target.rank, comm_.wire_tag(sequence, 0));
    });
    const auto heard_all = [&] {
      read_all();
      bool all = true;
      each_live(sources_, [&](source_state& source) { all &= comm_.test(source.drained); });
      return all;
    };
    comm_.poll_until(heard_all, "window quiesce (a source is not in quiesce())");
    read_all();
    each_live(targets_, [&](target_state& target) {
      comm_.wait(target.drained, "window quiesce");
      comm_.wait(target.quiescing, "window quiesce (a target is not in quiesce())");
    });
    each_live(sources_, [&](source_state& source) { comm_.wait(source.quiescing, "window quiesce"); });
    listen_for_quiesce();
  }

  // Whether `target` has entered quiesce() (its notice arrived) while this
  // rank has not yet returned from its own: the target only reads until
  // every rank is in, so what is written to it now stays there until then.
  // A push-sum writer keeps that weight instead (one_sided_gossip), lest a
  // rank that finished first soak up the others' weight. A lost target is
  // not in quiesce().
  bool in_quiesce(int target) {
    in_order();
    target_state& state = named(targets_, target, "a target", "in_quiesce");
    bool heard = false;
    if (!links_.lost(target)) guarded([&] { heard = comm_.test(state.quiescing); });
    return heard && !links_.lost(target);
  }

  // Whether an accumulate to `target` would be written at once: nothing of
  // this rank's waits here for it, the link has carried the last entry, and
  // the target has room (its counter read without waiting: false until it
  // comes back). A push-sum writer keeps the share of a target that is not
  // (one_sided_gossip): kept pending, that weight would sit out of training
  // until the link frees and then land with the model of its oldest push.
  // A dead target is found here as by a write: dropped (false), or a
  // peer_failure.
  bool ready(int target) {
    in_order();
    target_state& state = named(targets_, target, "a target", "ready");
    bool writable = false;  // stays false if guarded() drops it
    if (!links_.lost(target))
      guarded([&] {
        writable = !has_pending(state) && room_for(state, windows::entry_kind::accumulate, link_busy::keep_pending);
      });
    return writable;
  }

  // Whether the slots' payloads live in device memory (see "Device slots").
  bool on_device() const noexcept { return device_.has_value(); }

  // Forgets a dead neighbour: operations skip it from here on.
  void drop(int rank) {
    in_order();
    links_.drop(rank);
    for (auto& source : sources_)
      if (source.rank == rank) {
        source.drained = {};
        source.quiescing = {};
      }
    for (auto& target : targets_)
      if (target.rank == rank) {
        target.pending.clear();
        target.drained = {};
        target.quiescing = {};
      }
  }
  bool lost(int rank) const {
    in_order();
    return links_.lost(rank);
  }
  // The neighbours dropped so far (by drop(), or dead with drop_dead_peers).
  std::vector<int> dropped() const {
    std::vector<int> ranks;
    for (int rank : ranks_of(sources_))
      if (lost(rank)) ranks.push_back(rank);
    for (int rank : ranks_of(targets_))
      if (lost(rank) && std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
    return ranks;
  }

  // Collective: every write lands, the ranks meet, and the memory is
  // unregistered. Pending sums are not written (quiesce() first for that).
  // After a loss the survivors meet: each must have dropped the same ranks.
  void free() {
    if (freed_) return;
    in_order();
    freed_ = true;
    try {
      flush();
      std::vector<int> lost;
      for (int rank : dropped()) lost.push_back(comm_.world_rank(rank));
      if (lost.empty())
        comm_.barrier();
      else
        comm_.without(lost).barrier();
    } catch (...) {
      retire();
      throw;
    }
    for (target_state& target : targets_) target.quiescing = {};  // no notice comes after free()
    links_.close();
    device_.reset();
    region_.release();
  }

 private:
  struct source_state {
    int rank = -1;
    std::size_t offset = 0;  // its slot in this rank's region
    std::vector<float> value;
    std::vector<float> spare;  // a put is copied here, then swapped in (try_read_put_in_place)
    // Device slots: its payloads in the device region, and in device
    // memory (`memory` holds them): value and spare, as above, and room for
    // copies of two entries.
    std::size_t device_offset = 0;
    std::shared_ptr<void> memory;
    float* device_value = nullptr;
    float* device_spare = nullptr;
    std::byte* device_copies = nullptr;
    double p = 0.0;
    std::uint64_t consumed = 0;                // entries applied to value
    std::uint64_t seen = 0;                    // consumed at the last update or collect
    std::uint64_t gets = 0;                    // gets since then
    typename Communicator::request drained;    // quiesce(): its "drained" mark
    typename Communicator::request quiescing;  // quiesce(): this rank's notice that it is in
  };
  struct pending_entry {
    windows::entry_kind kind{};
    std::vector<float> values;
    std::shared_ptr<void> on_device;  // device slots: the values, in device memory
    double p = 0.0;
    float* device_values() const noexcept { return static_cast<float*>(on_device.get()); }
  };
  struct target_state {
    int rank = -1;
    std::size_t offset = 0;  // this rank's slot in the target's region
    std::uint64_t written = 0;
    std::uint64_t consumed = 0;         // the target's counter, as last read
    std::deque<pending_entry> pending;  // one at most, unless ordered
    std::vector<std::byte> staging;     // an entry on its way over the network
    std::unique_ptr<codec::any_error_feedback> feedback;
    // Device slots: this rank's slot in the target's device region, and in
    // device memory (`memory`) the encoded entry on its way and error
    // feedback's residual.
    std::size_t device_offset = 0;
    std::shared_ptr<void> memory;
    std::byte* device_staging = nullptr;
    float* device_residual = nullptr;
    typename Communicator::request drained;    // quiesce(): this rank's "drained" mark
    typename Communicator::request quiescing;  // its notice that it is in quiesce() (posted receive)
  };

  // Calls complete in the order made (call_order.hpp).
  void in_order() const { calls_.wait_previous(comm_); }
  template <class Work>
  window_request in_background(Work work) {
    return calls_.in_background(comm_, std::move(work));
  }

  // A put or accumulate's request: complete once everything written so far
  // is sent (an approximation from above: later writes count too).
  window_request sent_request() {
    const std::shared_ptr<window*> alive = alive_;
    const auto owner = [alive]() -> window& {
      if (*alive == nullptr || (*alive)->freed_)
        throw error(errc::invalid_argument, "the request's window is freed", {-1, -1, "window request"});
      return **alive;
    };
    return {[owner] { return owner().test(); },
            [owner] {
              window& win = owner();
              win.comm_.poll_until([&] { return win.sent(); }, "window request (a target does not read its slot)");
            }};
  }
  bool sent() {
    write_pending();
    bool all = true;
    each_live(targets_, [&](target_state& target) { all &= link(target.rank).test() && !has_pending(target); });
    return all;
  }

  void get_now(const std::vector<neighbour_weight>& from) {
    in_device_pass([&] {
      write_pending();
      for_each_weighted(sources_, from, "get", [&](source_state& source, double weight) {
        read_new(source);  // entries before the get are superseded by it
        read_published(source, weight);
      });
    });
  }

  // No self_weight: uniform weights over this rank and its live sources.
  void update_now(std::span<float> given, std::optional<double> self_weight, std::vector<neighbour_weight> from,
                  bool reset) {
    if (!self_weight) {
      self_weight = 1.0 / static_cast<double>(live_sources() + 1);
      for (const source_state& source : sources_)
        if (!links_.lost(source.rank)) from.push_back({source.rank, *self_weight});
    }
    if (device_) {
      require_device(given, "update");
      return on_device([&] { update_on_device(given, *self_weight, from, reset); });
    }
    on_host(given, buffer_use::read_write, [&](std::span<float> out) { update_host(out, *self_weight, from, reset); });
  }

  template <class OnSlot>
  void collect_now(OnSlot&& on_slot, bool reset) {
    in_device_pass([&] {
      write_pending();
      each_live(sources_, [&](source_state& source) { read_new(source); });
      settle_device();
      for (source_state& source : sources_) {
        if (links_.lost(source.rank)) continue;
        on_slot(source.rank, value_of(source), source.p);
        settle(source, reset);
      }
    });
  }
  template <class OnSlot>
  void collect_from_now(std::span<const int> from, OnSlot&& on_slot, bool reset) {
    write_pending();
    for (int rank : from) {
      source_state& source = named(sources_, rank, "a source", "collect_from");
      if (!links_.lost(rank)) guarded([&] { read_new(source); });
      if (links_.lost(rank)) continue;
      settle_device();
      on_slot(source.rank, value_of(source), source.p);
      settle(source, reset);
    }
  }
  // A source's value, where it lives (device memory on device slots).
  std::span<const float> value_of(const source_state& source) const {
    return device_ ? std::span<const float>(source.device_value, elements_) : std::span<const float>(source.value);
  }

  static std::vector<int> ranks_of(const auto& states) {
    std::vector<int> ranks;
    for (const auto& state : states) ranks.push_back(state.rank);
    return ranks;
  }

  error failure(errc code, const std::string& what, int peer, const std::string& operation) const {
    return error(code, what, {comm_.world_rank(comm_.rank()), peer < 0 ? -1 : comm_.world_rank(peer), operation});
  }
  void require_size(std::size_t given, const char* operation) const {
    if (given != elements_)
      throw failure(errc::invalid_argument,
                    std::to_string(given) + " elements for a window of " + std::to_string(elements_), -1,
                    std::string("window ") + operation);
  }

  // The graph every rank agrees on (graph.hpp), and this rank's sources'
  // and targets' states from it: where each slot is, host or device.
  void agree_on_graph(const std::optional<std::vector<int>>& given, bool feedback, const path_report& device) {
    const windows::graph agreed = windows::agree_on_graph(comm_, given, elements_, slot_.payload_bytes, device.direct);
    choose_slot_memory(device, agreed.refusing_device);
    std::size_t offset = published_.bytes();
    for (int source : agreed.sources) {
      source_state state;
      state.rank = source;
      state.offset = offset;
      state.device_offset = device_layout_.slot_at(sources_.size());
      if (!device_slots_) state.value.assign(elements_, 0.0f);
      sources_.push_back(std::move(state));
      offset += slot_.bytes();
    }
    for (const windows::graph::target& target : agreed.targets) {
      target_state state;
      state.rank = target.rank;
      state.offset = published_.bytes() + target.position * slot_.bytes();
      state.device_offset = device_layout_.slot_at(target.position);
      if (codec_ && feedback) state.feedback = std::make_unique<codec::any_error_feedback>(codec_);
      targets_.push_back(std::move(state));
    }
  }

  // Registers this rank's region (and its device region), publishes
  // `initial` and trades cards with every neighbour (so a neighbour that has
  // the card finds a tensor).
  void expose(std::span<const float> initial) {
    transport_type& network = comm_.transport();
    region_ = network.expose(published_.bytes() + sources_.size() * slot_.bytes());
    if (device_slots_) make_device_memory();
    publish(initial);
    std::vector<int> neighbours = ranks_of(sources_);
    for (const target_state& target : targets_) neighbours.push_back(target.rank);
    std::sort(neighbours.begin(), neighbours.end());
    neighbours.erase(std::unique(neighbours.begin(), neighbours.end()), neighbours.end());
    const std::uint32_t sequence = comm_.next_sequence();
    std::vector<std::vector<std::byte>> cards =
        windows::trade_cards(comm_, neighbours, region_.card(), comm_.wire_tag(sequence, 0));
    std::vector<typename transport_type::remote_memory> memories;
    for (std::size_t k = 0; k < neighbours.size(); ++k)
      memories.push_back(network.reach(comm_.world_rank(neighbours[k]), cards[k]));
    if (device_) {
      cards = windows::trade_cards(comm_, neighbours, device_->card(), comm_.wire_tag(sequence, 2));
      for (std::size_t k = 0; k < neighbours.size(); ++k)
        device_->reach(neighbours[k], comm_.world_rank(neighbours[k]), cards[k]);
    }
    const std::vector<windows::reach> ways =
        windows::agree_on_reach(comm_, neighbours, memories, comm_.wire_tag(sequence, 1));
    links_.connect(neighbours, std::move(memories), ways, std::span(region_.data(), region_.size()));
  }

  // Posts the receives for each target's notice that it entered the next
  // quiesce(), on a sequence every rank reserves here (at creation and at
  // the end of each quiesce(), which is collective). Standing: a target
  // that leaves (its job done) or dies while one is posted fails no other
  // wait (transport.hpp).
  void listen_for_quiesce() {
    quiesce_notice_ = comm_.next_sequence();
    each_live(targets_, [&](target_state& target) {
      target.quiescing =
          comm_.irecv_bytes({}, target.rank, comm_.wire_tag(quiesce_notice_, 0), transport::receive_kind::standing);
    });
  }

  region& link(int rank) { return links_[rank]; }

  // After a failure (or a window dropped without free()), a peer may still
  // write into this rank's memory: it is unmapped when the worker is gone.
  void retire() noexcept {
    links_.abandon_all();
    if (device_) device_->retire();
    try {
      comm_.transport().retire(std::move(region_));
    } catch (...) {  // out of memory for the list: leak the region rather than free it under a writer
      new typename transport_type::exposed_memory(std::move(region_));
    }
  }

  // Liveness and the drop policy are the links' (neighbour_links.hpp).
  template <class States, class F>
  void each_live(States& states, F&& f) {
    links_.each_live(states, f);
  }
  template <class F>
  void guarded(F&& f) {
    links_.guarded(f);
  }
  [[noreturn]] void gone(int peer, const std::string& operation) const { links_.fail_gone(peer, operation); }
  bool has_pending(const target_state& target) const { return !target.pending.empty() && !links_.lost(target.rank); }

  static double weight_of(const std::vector<neighbour_weight>& weights, int rank) {
    for (const neighbour_weight& entry : weights)
      if (entry.rank == rank) return entry.weight;
    return 0.0;
  }

  std::size_t live_sources() const {
    return static_cast<std::size_t>(
        std::count_if(sources_.begin(), sources_.end(), [&](const source_state& s) { return !links_.lost(s.rank); }));
  }

  template <class States>
  auto& named(States& states, int rank, const char* what, const char* operation) const {
    for (auto& state : states)
      if (state.rank == rank) return state;
    throw failure(errc::invalid_argument, "rank " + std::to_string(rank) + " is not " + what + " of this rank", -1,
                  std::string("window ") + operation);
  }
  const source_state& source_named(int rank, const char* operation) const {
    return named(sources_, rank, "a source", operation);
  }

  // f(state, weight) for each state named in `weights`, or every live one
  // with weight 1 when it is empty.
  template <class State, class F>
  void for_each_weighted(std::vector<State>& states, const std::vector<neighbour_weight>& weights,
                         const char* operation, F&& f) {
    if (weights.empty()) return each_live(states, [&](State& state) { f(state, 1.0); });
    for (const neighbour_weight& entry : weights) {
      State& state =
          named(states, entry.rank, std::is_same_v<State, source_state> ? "a source" : "a target", operation);
      if (links_.lost(state.rank) && !links_.drops_dead()) gone(state.rank, std::string("window ") + operation);
      if (!links_.lost(state.rank)) guarded([&] { f(state, entry.weight); });
    }
  }

  // Writer side ----------------------------------------------------------

  // What a write does while the link still sends this rank's previous
  // entry to the target (over the network: its staging buffer is busy).
  enum class link_busy {
    wait,          // the blocking forms: wait for it
    keep_pending,  // the non-blocking forms and later calls: keep the entry pending (summed, or superseded)
  };

  void write_to_targets(windows::entry_kind kind, std::span<const float> given, const std::vector<neighbour_weight>& to,
                        link_busy busy) {
    const char* operation = kind == windows::entry_kind::put ? "put" : "accumulate";
    require_size(given.size(), operation);
    const auto write_all = [&](std::span<const float> values) {
      write_pending();
      for_each_weighted(targets_, to, operation, [&](target_state& target, double weight) {
        // Straight from the caller's values when nothing waits (one pass:
        // no scaled copy), else through the queue.
        if (target.pending.empty() && weight == 1.0 && write_entry(target, kind, values, p_, busy)) return;
        add_pending(target, kind, values, weight);
        write_entry_if_room(target, busy);
      });
    };
    if (device_) {
      require_device(given, operation);
      return on_device([&] { write_all(given); });
    }
    on_host(given, buffer_use::read, write_all);
  }

  void update_host(std::span<float> out, double self_weight, const std::vector<neighbour_weight>& from, bool reset) {
    for (const neighbour_weight& entry : from) (void)named(sources_, entry.rank, "a source", "update");
    std::vector<double> combined(out.size());
    for (std::size_t k = 0; k < out.size(); ++k) combined[k] = self_weight * static_cast<double>(out[k]);
    double p = self_weight * p_;
    collect_now(
        [&](int source, std::span<const float> value, double source_p) {
          const double weight = weight_of(from, source);
          if (weight == 0.0) return;
          for (std::size_t k = 0; k < out.size(); ++k) combined[k] += weight * static_cast<double>(value[k]);
          p += weight * source_p;
        },
        reset);
    for (std::size_t k = 0; k < out.size(); ++k) out[k] = static_cast<float>(combined[k]);
    p_ = p;
  }

  // This rank's published tensor: written in place (the slot protocol with
  // this rank as the writer; the readers are remote).
  // write_payload(number, where the header ends) writes the payload.
  template <class WritePayload>
  void publish_entry(std::size_t payload_bytes, WritePayload&& write_payload) {
    std::byte* slot = region_.data();
    const std::uint64_t number = ++published_count_;
    windows::counter_at(slot, windows::begun_at).fetch_add(1, std::memory_order_acq_rel);
    std::byte* entry = slot + published_.entry_at(number);
    const windows::entry_header header{windows::entry_kind::put, 0, number, p_, payload_bytes};
    windows::copy_racing(entry, &header, sizeof header);
    write_payload(number, entry + sizeof header);
    windows::counter_at(slot, windows::completed_at).fetch_add(1, std::memory_order_acq_rel);
  }
  void publish_host(std::span<const float> values) {
    publish_entry(published_.payload_bytes, [&](std::uint64_t, std::byte* payload) {
      windows::copy_racing(payload, values.data(), values.size_bytes());
    });
  }

  // Device memory (a router installed: route/memory_router.hpp) is staged:
  // `body` runs on a host copy, copied back when it writes.
  template <class T, class Body>
  void on_host(std::span<T> values, buffer_use use, Body&& body) {
    if (memory_router* router = routed(values))
      return through_host(*router, comm_, [&](std::span<T> host) { body(host); }, staged(values, use));
    body(values);
  }

  // Unordered, a put replaces what is pending for the target and an
  // accumulate adds to it (to a pending put too: put then accumulate is a
  // put of the sum). Ordered, every entry waits its turn.
  void add_pending(target_state& target, windows::entry_kind kind, std::span<const float> values, double weight) {
    if (device_) return add_pending_on_device(target, kind, values, weight);
    const auto scale = static_cast<float>(weight);
    if (ordered_ || kind == windows::entry_kind::put || target.pending.empty()) {
      if (!ordered_) target.pending.clear();
      pending_entry& entry = target.pending.emplace_back(pending_entry{kind, {}, {}, weight * p_});
      entry.values.resize(elements_);
      for (std::size_t k = 0; k < elements_; ++k) entry.values[k] = scale * values[k];
      return;
    }
    pending_entry& entry = target.pending.back();
    for (std::size_t k = 0; k < elements_; ++k) entry.values[k] += scale * values[k];
    entry.p += weight * p_;
  }

  void write_pending() {
    links_.rethrow_if_failed();
    if (!any_pending()) return;
    in_device_pass([&] {
      each_live(targets_, [&](target_state& target) {
        while (has_pending(target) && write_entry_if_room(target, link_busy::keep_pending)) {}
      });
    });
  }

  // Writes the oldest pending entry if the target has room for it.
  bool write_entry_if_room(target_state& target, link_busy busy) {
    const pending_entry& next = target.pending.front();
    const std::span<const float> values =
        device_ ? std::span<const float>(next.device_values(), elements_) : std::span<const float>(next.values);
    if (!write_entry(target, next.kind, values, next.p, busy)) return false;
    target.pending.pop_front();
    return true;
  }

  // Writes an entry unless the target has no room for it yet (an
  // accumulate needs consumed >= k - 2 (slot.hpp), any entry of an ordered
  // window consumed >= k - 1) or, with keep_pending, the link still sends
  // the previous one: a writer behind a slow link then sends sums of its
  // pushes at the link's pace instead of waiting for it. True if it wrote.
  bool write_entry(target_state& target, windows::entry_kind kind, std::span<const float> values, double p,
                   link_busy busy) {
    if (!room_for(target, kind, busy)) return false;
    region& to = link(target.rank);
    const std::uint64_t number = target.written + 1;
    to.wait(comm_.deadline());  // the staging buffer is free again
    const std::size_t at = target.offset + slot_.entry_at(number);
    const windows::entry_header header{kind, 0, number, p, entry_payload_bytes()};
    to.increment(target.offset + windows::begun_at);
    if (device_)
      write_entry_on_device(target, to, at, header, values);
    else
      write_entry_on_host(target, to, at, header, values);
    to.increment(target.offset + windows::completed_at);
    target.written = number;
    traffic& counters = this_thread_traffic();
    counters.bytes_sent += sizeof header + header.payload_bytes;
    ++counters.messages_sent;
    return true;
  }

  // Header and payload written in place where the target's slot is mapped
  // here, else into the staging buffer and sent whole.
  void write_entry_on_host(target_state& target, region& to, std::size_t at, const windows::entry_header& header,
                           std::span<const float> values) {
    std::byte* entry = entry_buffer(target, to, at);
    windows::copy_racing(entry, &header, sizeof header);
    encode(target, values, std::span<std::byte>(entry + sizeof header, slot_.payload_bytes));
    if (!to.mapped()) to.write(at, std::span<const std::byte>(entry, sizeof header + slot_.payload_bytes));
  }

  // Where entry `at` of the target's slot is written: in place where it is
  // mapped here, else the staging buffer (free: the link was waited on).
  std::byte* entry_buffer(target_state& target, region& to, std::size_t at) {
    if (std::byte* entry = to.mapped_at(at)) return entry;
    target.staging.resize(slot_.entry_bytes());
    return target.staging.data();
  }

  std::size_t entry_payload_bytes() const noexcept {
    return device_ ? device_layout_.payload_bytes : slot_.payload_bytes;
  }

  // Whether this rank's next entry of `kind` can be written to the target
  // now: with keep_pending, not while the link still sends the last one;
  // and the target has room (slot.hpp: it has applied the entry two before
  // for an accumulate, the one before for any entry of an ordered window; a
  // put replaces, never waits). A dead target is found first: it reads no
  // more, so "no room" would keep the entry pending for good, and a writer
  // that never waits would never learn of the death.
  bool room_for(target_state& target, windows::entry_kind kind, link_busy busy) {
    if (busy == link_busy::keep_pending && !link(target.rank).test()) return false;
    if (links_.gone(target.rank)) gone(target.rank, "window write");
    const std::uint64_t number = target.written + 1;
    const std::uint64_t lag = ordered_ ? 1 : kind == windows::entry_kind::accumulate ? 2 : number;
    return consumed_at_least(target, number > lag ? number - lag : 0, busy);
  }

  // Whether the target has applied `entries` of this rank's entries; its
  // counter is read again only when the one last read says no. With
  // keep_pending the read does not wait (over the network it is a round
  // trip, behind whatever the link carries): false until it comes back.
  bool consumed_at_least(target_state& target, std::uint64_t entries, link_busy busy = link_busy::wait) {
    if (target.consumed >= entries) return true;
    const std::size_t counter = target.offset + windows::consumed_at;
    if (busy == link_busy::wait) {
      target.consumed = link(target.rank).load(counter, comm_.deadline());
    } else {
      std::uint64_t consumed = 0;
      if (!link(target.rank).try_load(counter, consumed)) return false;
      target.consumed = std::max(target.consumed, consumed);  // it may have been started before a blocking load
    }
    return target.consumed >= entries;
  }

  void encode(target_state& target, std::span<const float> values, std::span<std::byte> out) {
    if (target.feedback)
      target.feedback->visit([&](auto& feedback) { feedback.encode(values, out); });
    else
      codec_.encode(values, out);
  }

  void wait_written() {
    each_live(targets_, [&](target_state& target) { link(target.rank).wait(comm_.deadline()); });
  }

  // Reader side ----------------------------------------------------------

  std::uint64_t completed(const source_state& source) const {
    return windows::counter_at(region_.data() + source.offset, windows::completed_at).load(std::memory_order_acquire);
  }

  // Applies the entries landed in the source's slot since the last read,
  // copying again while the writer rewrites what it copies (bounded: a
  // writer that died mid-entry is a peer failure, a live one finishes).
  void read_new(source_state& source) {
    in_device_pass([&] {
      if (try_read_new(source)) return;
      comm_.poll_until(
          [&] {
            links_.serve_relay_if_here();
            return try_read_new(source);
          },
          "window read", source.rank);
    });
  }

  // True once the slot's new entries are applied (or there are none);
  // false when the copy was not whole. Copied and checked before use: the
  // newest entry (copy 0) and, when it is an accumulate whose predecessor
  // is unread, that one too (copy 1). On device slots copies_ holds the
  // headers alone and the payloads are copied on the device.
  bool try_read_new(source_state& source) {
    std::byte* slot = region_.data() + source.offset;
    const std::size_t entry_bytes = sizeof(windows::entry_header) + slot_.payload_bytes;
    copies_.resize(2 * entry_bytes);
    const std::uint64_t newest = windows::counter_at(slot, windows::completed_at).load(std::memory_order_acquire);
    if (newest == source.consumed) return true;
    if (!device_ && !codec_ && try_read_put_in_place(source, slot, newest)) return true;
    const auto copy_entry = [&](std::size_t index, std::uint64_t number) {
      windows::copy_racing(copies_.data() + index * entry_bytes, slot + slot_.entry_at(number), entry_bytes);
      if (device_)
        arithmetic().copy(payload_copy(source, index, entry_bytes),
                          device_->data() + device_layout_.payload_at(source.device_offset, number),
                          device_layout_.payload_bytes);
    };
    copy_entry(0, newest);
    std::uint64_t oldest = newest;
    windows::entry_header head;
    std::memcpy(&head, copies_.data(), sizeof head);
    if (head.kind == windows::entry_kind::accumulate && newest - 1 > source.consumed)
      copy_entry(1, oldest = newest - 1);
    settle_device();  // the payloads' copies are whole before `begun` says whether they were rewritten meanwhile
    std::atomic_thread_fence(std::memory_order_acquire);
    if (windows::counter_at(slot, windows::begun_at).load(std::memory_order_acquire) >= oldest + 2) {
      if (links_.gone(source.rank)) gone(source.rank, "window read (its writer died mid-entry)");
      return false;
    }
    const auto [last, first] =
        checked_entries(source, copies_.data(), copies_.data() + entry_bytes, newest, oldest, entry_payload_bytes());
    if (oldest != newest) apply_one(source, first, payload_copy(source, 1, entry_bytes));
    apply_one(source, last, payload_copy(source, 0, entry_bytes));
    source.consumed = newest;
    windows::counter_at(slot, windows::consumed_at).store(newest, std::memory_order_release);
    return true;
  }

  // Where copy `index`'s payload is: after its header here, or in the
  // source's device copies.
  std::byte* payload_copy(source_state& source, std::size_t index, std::size_t entry_bytes) {
    if (device_) return source.device_copies + index * device_layout_.slot_entry();
    return copies_.data() + index * entry_bytes + sizeof(windows::entry_header);
  }

  // Without a codec, a put entry is copied once, into the spare value that
  // then becomes the value: false when the newest entry is not a put, or
  // was rewritten meanwhile (the value is untouched; the general path reads).
  bool try_read_put_in_place(source_state& source, std::byte* slot, std::uint64_t newest) {
    const std::byte* entry = slot + slot_.entry_at(newest);
    windows::entry_header head;
    windows::copy_racing(&head, entry, sizeof head);
    if (head.kind != windows::entry_kind::put) return false;
    source.spare.resize(elements_);
    windows::copy_racing(source.spare.data(), entry + sizeof head, slot_.payload_bytes);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (windows::counter_at(slot, windows::begun_at).load(std::memory_order_acquire) >= newest + 2) return false;
    (void)windows::checked_header(reinterpret_cast<const std::byte*>(&head), newest, slot_.payload_bytes, "window read",
                                  comm_.world_rank(comm_.rank()), comm_.world_rank(source.rank));
    source.value.swap(source.spare);
    source.p = head.p;
    source.consumed = newest;
    windows::counter_at(slot, windows::consumed_at).store(newest, std::memory_order_release);
    return true;
  }

  // The headers of whole copies of entries newest and (when it differs)
  // oldest, checked: an accumulate must not have overwritten an entry not
  // yet read.
  std::pair<windows::entry_header, windows::entry_header> checked_entries(const source_state& source,
                                                                          const std::byte* newest_copy,
                                                                          const std::byte* oldest_copy,
                                                                          std::uint64_t newest, std::uint64_t oldest,
                                                                          std::size_t payload_bytes) const {
    const int me = comm_.world_rank(comm_.rank()), peer = comm_.world_rank(source.rank);
    const auto overwritten = [&] {
      return failure(errc::mismatch, "window slot: an accumulate overwrote an entry not yet read", source.rank,
                     "window read");
    };
    const windows::entry_header last =
        windows::checked_header(newest_copy, newest, payload_bytes, "window read", me, peer);
    if (last.kind == windows::entry_kind::accumulate && oldest == newest && newest - 1 > source.consumed)
      throw overwritten();
    windows::entry_header first{};
    if (oldest != newest) {
      first = windows::checked_header(oldest_copy, oldest, payload_bytes, "window read", me, peer);
      if (first.kind == windows::entry_kind::accumulate && oldest - 1 > source.consumed) throw overwritten();
    }
    return {last, first};
  }

  void apply_one(source_state& source, const windows::entry_header& header, const std::byte* payload) {
    if (device_) return apply_on_device(source, header, payload);
    const std::span<const std::byte> bytes(payload, slot_.payload_bytes);
    if (header.kind == windows::entry_kind::put) {
      codec_.decode(bytes, source.value);
      source.p = header.p;
    } else {
      codec_.decode_add(bytes, source.value);
      source.p += header.p;
    }
  }

  void settle(source_state& source, bool reset) {
    source.seen = source.consumed;
    source.gets = 0;
    if (!reset) return;
    if (device_)
      on_device([&] { arithmetic().zero(source.device_value, elements_); });
    else
      std::fill(source.value.begin(), source.value.end(), 0.0f);
    source.p = 0.0;
  }

  // A source's published tensor, copied whole (the same double buffer: it
  // is copied again when rewritten meanwhile), times `weight`.
  void read_published(source_state& source, double weight) {
    if (!try_read_published(source, weight))
      comm_.poll_until([&] { return try_read_published(source, weight); }, "window get", source.rank);
  }

  // The tensor is copied once, into the spare value that then becomes the
  // value; a copy that was not whole is copied again.
  bool try_read_published(source_state& source, double weight) {
    region& from = link(source.rank);
    if (links_.gone(source.rank)) gone(source.rank, "window get");
    const std::uint64_t newest = from.load(windows::completed_at, comm_.deadline());
    std::byte head[sizeof(windows::entry_header)];
    from.read(published_.entry_at(newest), head, comm_.deadline());
    const std::size_t bytes = elements_ * sizeof(float);
    if (device_)
      read_published_on_device(source, newest);
    else
      read_published_on_host(from, source, newest);
    if (from.load(windows::begun_at, comm_.deadline()) >= newest + 2) return false;
    const windows::entry_header header =
        windows::checked_header(head, newest, bytes, "window get", comm_.world_rank(comm_.rank()), from.world_rank());
    if (weight != 1.0) scale_spare(source, weight);
    swap_spare(source);
    source.p = weight * header.p;
    ++source.gets;
    return true;
  }

  // The source's published payload, into the spare value (the value once whole).
  void read_published_on_host(region& from, source_state& source, std::uint64_t newest) {
    source.spare.resize(elements_);
    from.read(published_.entry_at(newest) + sizeof(windows::entry_header),
              std::as_writable_bytes(std::span(source.spare)), comm_.deadline());
  }
  void swap_spare(source_state& source) {
    if (device_)
      std::swap(source.device_value, source.device_spare);
    else
      source.value.swap(source.spare);
  }
  // spare *= weight, in double, rounded once.
  void scale_spare(source_state& source, double weight) {
    if (!device_) {
      for (float& value : source.spare) value = static_cast<float>(weight * value);
      return;
    }
    local_arithmetic& where = arithmetic();
    auto* sum = static_cast<double*>(where.scratch(elements_ * sizeof(double), 2));
    where.weigh(sum, source.device_spare, elements_, weight, true);
    where.narrow(sum, source.device_spare, elements_);
  }

  // Device slots ---------------------------------------------------------

  // Whether this rank can keep its slots in device memory: its tensor is
  // device memory the router's direct path takes with the window's codec
  // (an empty reason: host memory, nothing to report).
  path_report device_slots_path(std::span<const float> initial) {
    memory_router* router = routed(initial);
    if (router == nullptr) return {};
    router_ = router;
    device_view_ = {initial.data(), initial.size_bytes(), buffer_use::read_write};
    const network_memory network = network_of(comm_);
    if (!codec_) return router->direct_path(device_view_, dtype::float32, "sum", network);
    std::optional<codec_spec> spec;
    codec::visit(codec_, [&](const auto& c) {
      if constexpr (codec::describable<std::remove_cvref_t<decltype(c)>>) spec = codec::spec_of(c);
    });
    if (!spec) return {false, staged_because("window slots in device memory with " + std::string(codec_.name()))};
    spec_ = *spec;
    return router->direct_path(device_view_, spec_, network);
  }

  // Device slots where every rank takes them (none `refusing`), else host
  // slots for all: the layouts differ. The debug report says which.
  void choose_slot_memory(const path_report& mine, int refusing) {
    device_slots_ = refusing < 0;
    if (device_slots_) {
      device_layout_ = {elements_ * sizeof(float), slot_.payload_bytes};
      slot_ = windows::slot_layout{0};  // counters and headers
      published_ = windows::slot_layout{0};
    }
    if (mine.reason.empty()) return;
    const std::size_t bytes = elements_ * sizeof(float);
    if (device_slots_)
      report_path(comm_, "window", bytes, "direct: its slots in device memory", record::path::direct);
    else if (mine.direct)
      report_path(comm_, "window", bytes,
                  "staged: rank " + std::to_string(refusing) +
                      " cannot keep its window slots in device memory (its tensor, its UCX or its kernels)");
    else
      report_path(comm_, "window", bytes, mine.reason);
  }

  // The device region, and each neighbour's payloads in device memory.
  void make_device_memory() {
    on_device([&] {
      local_arithmetic& where = arithmetic();
      device_.emplace(where, comm_.transport(), device_layout_.bytes(sources_.size()));
      links_.include_device_links(*device_);
      device_view_ = {device_->data(), device_->size(), buffer_use::read_write};
      const std::size_t tensor = device_layout_.published_entry(), payload = device_layout_.slot_entry();
      for (source_state& source : sources_) {
        source.memory = where.kept(2 * tensor + 2 * payload);
        auto* base = static_cast<std::byte*>(source.memory.get());
        source.device_value = reinterpret_cast<float*>(base);
        source.device_spare = reinterpret_cast<float*>(base + tensor);
        source.device_copies = base + 2 * tensor;
      }
      for (target_state& target : targets_) {
        const bool residual = target.feedback != nullptr;
        target.memory = where.kept(payload + (residual ? tensor : 0));
        auto* base = static_cast<std::byte*>(target.memory.get());
        target.device_staging = base;
        if (residual) target.device_residual = reinterpret_cast<float*>(base + payload);
      }
      where.settle();
    });
  }

  // Runs body() with the device's arithmetic at hand (arithmetic()): one
  // pass through the router's direct path per window call, however deep
  // the calls nest (in_order() keeps one call at a time).
  template <class Body>
  void on_device(Body&& body) {
    if (where_ != nullptr) return body();
    router_->through_direct(
        device_view_,
        [&](local_arithmetic& where) {
          const detail::scoped_value<local_arithmetic*> held(where_, &where);
          body();
        },
        detail::waiting_on(comm_));
  }
  // body() in a pass through the device's arithmetic where the slots are in
  // device memory (joining the pass under way), plainly where they are not.
  template <class Body>
  void in_device_pass(Body&& body) {
    if (device_)
      on_device(body);
    else
      body();
  }
  local_arithmetic& arithmetic() const noexcept { return *where_; }
  // The device's work so far is done (before a caller reads a value).
  void settle_device() {
    if (device_) arithmetic().settle();
  }
  bool any_pending() const {
    return std::any_of(targets_.begin(), targets_.end(), [&](const target_state& t) { return has_pending(t); });
  }
  void require_device(std::span<const float> values, const char* operation) const {
    if (router_->kind_of(values.data()) != memory_kind::cuda_device)
      throw failure(errc::invalid_argument, "a window whose slots are in device memory takes device tensors", -1,
                    std::string("window ") + operation);
  }
  std::byte* on_network(void* device_pointer) const {
    return static_cast<std::byte*>(arithmetic().network_address(device_pointer));
  }

  // The published tensor, by the slot protocol: header here, payload
  // copied on the device. Its own pass through the router: publish() may
  // come from a second thread.
  void publish_device(std::span<const float> values) {
    require_device(values, "publish");
    const auto publish_with = [&](local_arithmetic& where) {
      publish_entry(device_layout_.tensor_bytes, [&](std::uint64_t number, std::byte*) {
        where.copy(device_->data() + device_layout_.published_at(number), values.data(), device_layout_.tensor_bytes);
        where.settle();
      });
    };
    router_->through_direct(device_view_, publish_with, detail::waiting_on(comm_));
  }

  // As write_entry_on_host, with the payload encoded on the device and put
  // into the target's device region once `begun` landed (it may rewrite
  // entry number - 2's buffer), then flushed: the `completed` that follows
  // travels another transport, which a fence would not order.
  void write_entry_on_device(target_state& target, region& to, std::size_t at, const windows::entry_header& header,
                             std::span<const float> values) {
    encode_on_device(target, values);
    arithmetic().settle();  // whole before the transport reads it
    to.flush(comm_.deadline());
    std::byte* entry = entry_buffer(target, to, at);  // the header alone: slot_ has no payload
    windows::copy_racing(entry, &header, sizeof header);
    if (!to.mapped()) to.write(at, std::span<const std::byte>(entry, sizeof header));
    auto& payload_link = device_->link(target.rank);
    payload_link.write(device_layout_.payload_at(target.device_offset, header.number),
                       std::span<const std::byte>(on_network(target.device_staging), header.payload_bytes));
    payload_link.flush(comm_.deadline());
  }

  void encode_on_device(target_state& target, std::span<const float> values) {
    local_arithmetic& where = arithmetic();
    if (!codec_) {
      where.copy(target.device_staging, values.data(), values.size_bytes());
    } else if (target.device_residual != nullptr) {
      auto* work = static_cast<float*>(where.scratch(values.size_bytes(), 0));
      where.feedback_encode(spec_, values.data(), target.device_residual, work, target.device_staging, elements_);
    } else {
      where.encode(spec_, values.data(), target.device_staging, elements_);
    }
  }

  // As add_pending, on the device (products and sums rounded as there).
  void add_pending_on_device(target_state& target, windows::entry_kind kind, std::span<const float> values,
                             double weight) {
    local_arithmetic& where = arithmetic();
    const auto scale = static_cast<float>(weight);
    if (ordered_ || kind == windows::entry_kind::put || target.pending.empty()) {
      if (!ordered_ && !target.pending.empty()) {
        where.settle();  // no step may still use the memory about to go
        target.pending.clear();
      }
      pending_entry& entry =
          target.pending.emplace_back(pending_entry{kind, {}, where.kept(values.size_bytes()), weight * p_});
      where.multiply(values.data(), entry.device_values(), elements_, scale);
      return;
    }
    pending_entry& entry = target.pending.back();
    auto* scaled = static_cast<float*>(where.scratch(values.size_bytes(), 1));
    where.multiply(values.data(), scaled, elements_, scale);
    where.reduce_into(entry.device_values(), scaled, elements_, dtype::float32, "sum", false);
    entry.p += weight * p_;
  }

  void apply_on_device(source_state& source, const windows::entry_header& header, const std::byte* payload) {
    local_arithmetic& where = arithmetic();
    const bool put = header.kind == windows::entry_kind::put;
    if (codec_)
      where.decode(spec_, payload, source.device_value, elements_, !put);
    else if (put)
      where.copy(source.device_value, payload, elements_ * sizeof(float));
    else
      where.reduce_into(source.device_value, payload, elements_, dtype::float32, "sum", false);
    source.p = put ? header.p : source.p + header.p;
  }

  // As update_host: the weighted sum in double, on the device.
  void update_on_device(std::span<float> out, double self_weight, const std::vector<neighbour_weight>& from,
                        bool reset) {
    for (const neighbour_weight& entry : from) (void)named(sources_, entry.rank, "a source", "update");
    local_arithmetic& where = arithmetic();
    auto* sum = static_cast<double*>(where.scratch(elements_ * sizeof(double), 2));
    where.weigh(sum, out.data(), elements_, self_weight, true);
    double p = self_weight * p_;
    collect_now(
        [&](int source, std::span<const float> value, double source_p) {
          const double weight = weight_of(from, source);
          if (weight == 0.0) return;
          where.weigh(sum, value.data(), elements_, weight, false);
          p += weight * source_p;
        },
        reset);
    where.narrow(sum, out.data(), elements_);
    p_ = p;
  }

  // The source's published payload, by RMA into the spare device value.
  void read_published_on_device(source_state& source, std::uint64_t newest) {
    arithmetic().settle();  // no step still uses the spare value
    device_->link(source.rank)
        .read(device_layout_.published_at(newest),
              std::span<std::byte>(on_network(source.device_spare), device_layout_.tensor_bytes), comm_.deadline());
  }

  Communicator comm_;  // its own: the card exchange and barrier meet no one else's tags
  std::size_t elements_;
  codec::any_codec codec_;
  windows::slot_layout slot_;                       // source slots: encoded tensors
  windows::slot_layout published_;                  // the published tensor: floats
  typename transport_type::exposed_memory region_;  // [published][slot of each source, ascending]
  // Device slots: the router, the codec as its kernels know it, the device
  // payloads' layout and region, and the arithmetic of the call under way.
  memory_router* router_ = nullptr;
  codec_spec spec_{};
  bool device_slots_ = false;
  windows::device_layout device_layout_{};
  std::optional<windows::device_region<transport_type>> device_;
  routed_buffer device_view_{};
  local_arithmetic* where_ = nullptr;
  std::vector<source_state> sources_;
  std::vector<target_state> targets_;
  windows::neighbour_links<Communicator> links_;  // each neighbour's region, the relay, the watch
  std::vector<std::byte> copies_;                 // entries copied out of a slot, checked before use
  bool ordered_;
  double p_ = 1.0;
  std::uint32_t quiesce_notice_ = 0;  // the sequence of the next quiesce()'s notices
  std::uint64_t published_count_ = 0;
  bool freed_ = false;
  windows::call_order calls_;                                         // the get or update in flight
  std::shared_ptr<window*> alive_ = std::make_shared<window*>(this);  // null once gone: for put requests
};

template <class C>
window(C&, std::span<const float>, window_options = {}) -> window<C>;

}  // namespace chorus
