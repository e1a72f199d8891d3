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
// Parts (each owns its state; none calls back into the window, and the
// reader never calls the writer): graph.hpp and exposure.hpp set it up,
// neighbour_links.hpp reaches each neighbour and keeps its liveness,
// writer.hpp writes into the targets' slots, reader.hpp reads the sources',
// device_slots.hpp is the device's side, call_order.hpp runs the
// background calls. The window keeps the API, its published tensor,
// quiesce() and free().
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
// Non-blocking forms return a window_request (window_request.hpp): a write runs on
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
#include <chorus/core/error.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/memory_router.hpp>
#include <chorus/window/call_order.hpp>
#include <chorus/window/device_slots.hpp>
#include <chorus/window/exposure.hpp>
#include <chorus/window/graph.hpp>
#include <chorus/window/neighbour_links.hpp>
#include <chorus/window/neighbour_states.hpp>
#include <chorus/window/reader.hpp>
#include <chorus/window/window_request.hpp>
#include <chorus/window/slot.hpp>
#include <chorus/window/writer.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace chorus {

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
  using link_busy = windows::link_busy;
  using source_state = typename windows::reader<Communicator>::source_state;
  using target_state = typename windows::writer<Communicator>::target_state;

 public:
  // Collective: every rank of `comm` passes `initial` of the same size (it
  // is published at once) and options that agree (sources and targets).
  window(Communicator& comm, std::span<const float> initial, window_options options = {})
      : comm_(comm.split(0, comm.rank())),
        codec_(std::move(options.codec)),
        layout_{initial.size(), {codec_.encoded_bytes(initial.size())}, {initial.size() * sizeof(float)}},
        links_(comm_, options.drop_dead_peers),
        device_(comm_),
        writer_(comm_, links_, device_, codec_, layout_, options.ordered),
        reader_(comm_, links_, device_, codec_, layout_) {
    agree_on_graph(options.sources, options.error_feedback, device_.path(initial, codec_));
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

  std::size_t size() const noexcept { return layout_.elements; }
  const Communicator& communicator() const noexcept { return comm_; }
  std::vector<int> sources() const { return windows::ranks_of(reader_.sources()); }
  std::vector<int> targets() const { return windows::ranks_of(writer_.targets()); }

  // The weight that travels with puts and accumulates (push-sum's p); 1 at
  // creation.
  double p() const noexcept { return p_; }
  void set_p(double p) noexcept { p_ = p; }

  // Writes weight * values into each target's slot (replacing what it
  // holds), every target with weight 1 when `to` is empty.
  void put(std::span<const float> values, const std::vector<neighbour_weight>& to = {}) {
    const record::recorded_call recorded(record::recorder_of(comm_), record::window_call("put", values.size()));
    in_order();
    write(windows::entry_kind::put, values, to, link_busy::wait);
    writer_.wait_written();
  }
  // Adds weight * values to each target's slot.
  void accumulate(std::span<const float> values, const std::vector<neighbour_weight>& to = {}) {
    const record::recorded_call recorded(record::recorder_of(comm_), record::window_call("accumulate", values.size()));
    in_order();
    write(windows::entry_kind::accumulate, values, to, link_busy::wait);
    writer_.wait_written();
  }
  // The same, returning before the bytes on their way over the network are
  // sent: values may change at once. The request completes once they are
  // sent and, for an accumulate kept pending, written (its target read
  // enough to make room).
  window_request put_nonblocking(std::span<const float> values, const std::vector<neighbour_weight>& to = {}) {
    const record::recorded_call recorded(record::recorder_of(comm_),
                                         record::window_call("put_nonblocking", values.size()));
    in_order();
    write(windows::entry_kind::put, values, to, link_busy::keep_pending);
    return sent_request();
  }
  window_request accumulate_nonblocking(std::span<const float> values, const std::vector<neighbour_weight>& to = {}) {
    const record::recorded_call recorded(record::recorder_of(comm_),
                                         record::window_call("accumulate_nonblocking", values.size()));
    in_order();
    write(windows::entry_kind::accumulate, values, to, link_busy::keep_pending);
    return sent_request();
  }
  // Whether everything written so far has been sent (and pending sums written).
  bool test() {
    in_order();
    return writer_.sent();
  }

  // Replaces this rank's published tensor (what the ranks it is a source of
  // read with get()), with p.
  void publish(std::span<const float> given) {  // no in_order(): see "Threads"
    require_size(given.size(), "publish");
    if (device_.active())
      return device_.publish(given,
                             [&](std::size_t bytes, auto&& write_payload) { publish_entry(bytes, write_payload); });
    on_host(given, buffer_use::read, [&](std::span<const float> values) {
      publish_entry(layout_.published.payload_bytes, [&](std::uint64_t, std::byte* payload) {
        windows::copy_racing(payload, values.data(), values.size_bytes());
      });
    });
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
    device_.in_pass([&] {
      writer_.write_pending();
      reader_.collect(on_slot, reset);
    });
  }

  // The same for the sources named (in their order) alone: the others'
  // slots are left unread (a synchronous round reads only its senders).
  template <class OnSlot>
  void collect_from(std::span<const int> from, OnSlot&& on_slot, bool reset = false) {
    in_order();
    device_.in_pass([&] {
      writer_.write_pending();
      reader_.collect_from(from, on_slot, reset);
    });
  }

  // Entries landed in `source`'s slot since the last update() or collect()
  // (gets count one each).
  std::uint64_t version(int source) const {
    in_order();
    return reader_.version(source, "version");
  }

  // Waits until every source in `from` (all live sources when empty) has
  // at least `count` new versions; bounded by the communicator's timeout.
  // A source that dies meanwhile is a peer failure (or dropped).
  void wait_versions(std::uint64_t count, std::span<const int> from = {}) {
    in_order();
    std::vector<int> watched(from.begin(), from.end());
    if (from.empty()) watched = sources();
    for (int rank : watched) (void)reader_.source(rank, "wait_versions");
    const auto enough = [&] {
      writer_.write_pending();
      return reader_.have_versions(watched, count);
    };
    comm_.poll_until(enough, "window wait_versions");
  }

  // Waits until no entry is kept pending here: each target has read enough
  // to make room for it (an ordered window's round before the next).
  // Bounded by the timeout; the targets must be reading meanwhile.
  void wait_pending() {
    in_order();
    const auto written = [&] {
      writer_.write_pending();
      return !writer_.any_pending();
    };
    comm_.poll_until(written, "window wait_pending (a target does not read its slot)");
  }

  // Whether every target has read every entry written to it so far (the
  // pending ones are written first): a writer's "all taken" before it says
  // so on another channel (parameter_server's goodbye after accumulates).
  bool read_by_targets() {
    in_order();
    return writer_.read_by_targets();
  }

  // Waits until every entry written so far has landed at its target (not
  // the pending sums: they wait for their targets to read; see quiesce()).
  void flush() {
    const record::recorded_call recorded(record::recorder_of(comm_), record::window_call("flush", 0));
    in_order();
    writer_.flush();
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
    auto& sources = reader_.sources();
    auto& targets = writer_.targets();
    links_.each_live(sources, [&](source_state& source) {
      source.quiescing = comm_.isend_bytes({}, source.rank, comm_.wire_tag(quiesce_notice_, 0));
    });
    const std::uint32_t sequence = comm_.next_sequence();
    links_.each_live(sources, [&](source_state& source) {
      source.drained = comm_.irecv_bytes({}, source.rank, comm_.wire_tag(sequence, 0));
    });
    const auto written = [&] {
      writer_.write_pending();
      reader_.read_all();
      return !writer_.any_pending();
    };
    comm_.poll_until(written, "window quiesce (a target is not in quiesce())");
    writer_.flush();
    links_.each_live(targets, [&](target_state& target) {
      target.drained = comm_.isend_bytes({}, target.rank, comm_.wire_tag(sequence, 0));
    });
    const auto heard_all = [&] {
      reader_.read_all();
      bool all = true;
      links_.each_live(sources, [&](source_state& source) { all &= comm_.test(source.drained); });
      return all;
    };
    comm_.poll_until(heard_all, "window quiesce (a source is not in quiesce())");
    reader_.read_all();
    links_.each_live(targets, [&](target_state& target) {
      comm_.wait(target.drained, "window quiesce");
      comm_.wait(target.quiescing, "window quiesce (a target is not in quiesce())");
    });
    links_.each_live(sources, [&](source_state& source) { comm_.wait(source.quiescing, "window quiesce"); });
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
    target_state& state = writer_.target(target, "in_quiesce");
    bool heard = false;
    if (!links_.lost(target)) links_.guarded([&] { heard = comm_.test(state.quiescing); });
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
    return writer_.ready(writer_.target(target, "ready"));
  }

  // Whether the slots' payloads live in device memory (see "Device slots").
  bool on_device() const noexcept { return device_.active(); }

  // Forgets a dead neighbour: operations skip it from here on.
  void drop(int rank) {
    in_order();
    links_.drop(rank);
    for (source_state& source : reader_.sources())
      if (source.rank == rank) {
        source.drained = {};
        source.quiescing = {};
      }
    writer_.drop(rank);
  }
  bool lost(int rank) const {
    in_order();
    return links_.lost(rank);
  }
  // The neighbours dropped so far (by drop(), or dead with drop_dead_peers).
  std::vector<int> dropped() const {
    std::vector<int> ranks;
    for (int rank : sources())
      if (lost(rank)) ranks.push_back(rank);
    for (int rank : targets())
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
    for (target_state& target : writer_.targets()) target.quiescing = {};  // no notice comes after free()
    links_.close();
    device_.release();
    region_.release();
  }

 private:
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
              win.comm_.poll_until([&] { return win.writer_.sent(); },
                                   "window request (a target does not read its slot)");
            }};
  }

  // A write of `given`, where the slots are: a pass through the device, or
  // a host copy of device memory the router stages.
  void write(windows::entry_kind kind, std::span<const float> given, const std::vector<neighbour_weight>& to,
             link_busy busy) {
    const char* operation = kind == windows::entry_kind::put ? "put" : "accumulate";
    require_size(given.size(), operation);
    const auto write_all = [&](std::span<const float> values) { writer_.write(kind, values, to, p_, busy); };
    if (device_.active()) {
      device_.require(given, operation);
      return device_.on_device([&] { write_all(given); });
    }
    on_host(given, buffer_use::read, write_all);
  }

  void get_now(const std::vector<neighbour_weight>& from) {
    device_.in_pass([&] {
      writer_.write_pending();
      reader_.get(from);
    });
  }

  void update_now(std::span<float> given, std::optional<double> self_weight, std::vector<neighbour_weight> from,
                  bool reset) {
    const auto update_all = [&](std::span<float> out) {
      writer_.write_pending();
      p_ = reader_.update(out, self_weight, std::move(from), reset, p_);
    };
    if (device_.active()) {
      device_.require(given, "update");
      return device_.on_device([&] { update_all(given); });
    }
    on_host(given, buffer_use::read_write, update_all);
  }

  // Device memory (a router installed: route/memory_router.hpp) is staged:
  // `body` runs on a host copy, copied back when it writes.
  template <class T, class Body>
  void on_host(std::span<T> values, buffer_use use, Body&& body) {
    if (memory_router* router = routed(values))
      return through_host(*router, comm_, [&](std::span<T> host) { body(host); }, staged(values, use));
    body(values);
  }

  void require_size(std::size_t given, const char* operation) const {
    if (given != layout_.elements)
      throw windows::window_error(
          comm_, errc::invalid_argument,
          std::to_string(given) + " elements for a window of " + std::to_string(layout_.elements), -1,
          std::string("window ") + operation);
  }

  // The graph every rank agrees on (graph.hpp), and from it this rank's
  // sources and targets, host or device slots.
  void agree_on_graph(const std::optional<std::vector<int>>& given, bool feedback, const path_report& device) {
    const windows::graph agreed =
        windows::agree_on_graph(comm_, given, layout_.elements, layout_.slot.payload_bytes, device.direct);
    device_.choose(device, agreed.refusing_device, layout_);
    for (int source : agreed.sources) reader_.add_source(source);
    for (const windows::graph::target& target : agreed.targets)
      writer_.add_target(target.rank, target.position, feedback);
  }

  // Registers this rank's region (and its device region), publishes
  // `initial` and trades cards with every neighbour (so a neighbour that has
  // the card finds a tensor).
  void expose(std::span<const float> initial) {
    transport_type& network = comm_.transport();
    region_ = network.expose(layout_.bytes(reader_.sources().size()));
    reader_.read_from(std::span(region_.data(), region_.size()));
    if (device_.chosen())
      device_.on_device([&] {
        device_.make_region(reader_.sources().size(), links_);
        reader_.make_device_memory();
        writer_.make_device_memory();
        device_.arithmetic().settle();
      });
    publish(initial);
    std::vector<int> neighbours = sources();
    for (int target : targets()) neighbours.push_back(target);
    std::sort(neighbours.begin(), neighbours.end());
    neighbours.erase(std::unique(neighbours.begin(), neighbours.end()), neighbours.end());
    const std::uint32_t sequence = comm_.next_sequence();
    std::vector<std::vector<std::byte>> cards =
        windows::trade_cards(comm_, neighbours, region_.card(), comm_.wire_tag(sequence, 0));
    std::vector<typename transport_type::remote_memory> memories;
    for (std::size_t k = 0; k < neighbours.size(); ++k)
      memories.push_back(network.reach(comm_.world_rank(neighbours[k]), cards[k]));
    if (device_.active()) {
      cards = windows::trade_cards(comm_, neighbours, device_.card(), comm_.wire_tag(sequence, 2));
      for (std::size_t k = 0; k < neighbours.size(); ++k) device_.reach(neighbours[k], cards[k]);
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
    links_.each_live(writer_.targets(), [&](target_state& target) {
      target.quiescing =
          comm_.irecv_bytes({}, target.rank, comm_.wire_tag(quiesce_notice_, 0), transport::receive_kind::standing);
    });
  }

  // This rank's published tensor: written in place (the slot protocol with
  // this rank as the writer; the readers are remote).
  // write_payload(number, where the header ends) writes the payload.
  template <class WritePayload>
  void publish_entry(std::size_t payload_bytes, WritePayload&& write_payload) {
    std::byte* slot = region_.data();
    const std::uint64_t number = ++published_count_;
    windows::counter_at(slot, windows::begun_at).fetch_add(1, std::memory_order_acq_rel);
    std::byte* entry = slot + layout_.published.entry_at(number);
    const windows::entry_header header{windows::entry_kind::put, 0, number, p_, payload_bytes};
    windows::copy_racing(entry, &header, sizeof header);
    write_payload(number, entry + sizeof header);
    windows::counter_at(slot, windows::completed_at).fetch_add(1, std::memory_order_acq_rel);
  }

  // After a failure (or a window dropped without free()), a peer may still
  // write into this rank's memory: it is unmapped when the worker is gone.
  void retire() noexcept {
    links_.abandon_all();
    device_.retire();
    try {
      comm_.transport().retire(std::move(region_));
    } catch (...) {  // out of memory for the list: leak the region rather than free it under a writer
      new typename transport_type::exposed_memory(std::move(region_));
    }
  }

  Communicator comm_;  // its own: the card exchange and barrier meet no one else's tags
  codec::any_codec codec_;
  windows::region_layout layout_;                   // elements, source slots (encoded), the published tensor (floats)
  typename transport_type::exposed_memory region_;  // [published][slot of each source, ascending]
  windows::neighbour_links<Communicator> links_;    // each neighbour's region, the relay, the watch
  windows::device_slots<Communicator> device_;      // the payloads in device memory, when they are
  windows::writer<Communicator> writer_;            // into the targets' slots
  windows::reader<Communicator> reader_;            // of the sources' slots and published tensors
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
