// writer: a window rank's side as a writer, into its targets' slots (the
// ranks that list it as a source). Per target: entries written, the
// target's consumed counter as last read, entries kept pending, error
// feedback's residual. An entry goes out when the target has room for it
// (slot.hpp: an accumulate needs the entry two before applied, any entry
// of an ordered window the one before; a put replaces, never waits); else
// it waits here, summed with the next accumulates, so a slow link carries
// sums at its pace. Cost: one entry (header + encoded tensor) per target
// and write; memory: a pending tensor per target, a staging entry per
// target reached over the network.
#pragma once

#include <chorus/codec/any_codec.hpp>
#include <chorus/codec/any_error_feedback.hpp>
#include <chorus/comm/traffic.hpp>
#include <chorus/core/error.hpp>
#include <chorus/route/local_arithmetic.hpp>
#include <chorus/window/device_slots.hpp>
#include <chorus/window/neighbour_links.hpp>
#include <chorus/window/neighbour_states.hpp>
#include <chorus/window/slot.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <vector>

namespace chorus::windows {

// What a write does while the link still sends this rank's previous entry
// to the target (over the network: its staging buffer is busy).
enum class link_busy {
  wait,          // the blocking forms: wait for it
  keep_pending,  // the non-blocking forms and later calls: keep the entry pending (summed, or superseded)
};

template <class Communicator>
class writer {
  using region = typename neighbour_links<Communicator>::region;

 public:
  struct pending_entry {
    entry_kind kind{};
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

  writer(Communicator& comm, neighbour_links<Communicator>& links, device_slots<Communicator>& device,
         const codec::any_codec& codec, const region_layout& layout, bool ordered)
      : comm_(comm), links_(links), device_(device), codec_(codec), layout_(layout), ordered_(ordered) {}
  writer(const writer&) = delete;
  writer& operator=(const writer&) = delete;

  // A target in whose region this rank's slot is at `position`.
  void add_target(int rank, std::size_t position, bool feedback) {
    target_state state;
    state.rank = rank;
    state.offset = layout_.slot_at(position);
    state.device_offset = device_.layout().slot_at(position);
    if (codec_ && feedback) state.feedback = std::make_unique<codec::any_error_feedback>(codec_);
    targets_.push_back(std::move(state));
  }
  // Device slots: each target's staging entry and residual in device
  // memory. In a pass (device_slots::on_device).
  void make_device_memory() {
    local_arithmetic& where = device_.arithmetic();
    const std::size_t tensor = device_.layout().published_entry(), payload = device_.layout().slot_entry();
    for (target_state& target : targets_) {
      const bool residual = target.feedback != nullptr;
      target.memory = where.kept(payload + (residual ? tensor : 0));
      auto* base = static_cast<std::byte*>(target.memory.get());
      target.device_staging = base;
      if (residual) target.device_residual = reinterpret_cast<float*>(base + payload);
    }
  }

  std::vector<target_state>& targets() noexcept { return targets_; }
  const std::vector<target_state>& targets() const noexcept { return targets_; }
  target_state& target(int rank, const char* operation) { return named(comm_, targets_, rank, "a target", operation); }

  // weight * values with p into each target in `to` (every live one with
  // weight 1 when empty), or kept pending; the values are where the slots
  // are (device memory on device slots, in a pass).
  void write(entry_kind kind, std::span<const float> values, const std::vector<neighbour_weight>& to, double p,
             link_busy busy) {
    const char* operation = kind == entry_kind::put ? "put" : "accumulate";
    write_pending();
    for_each_weighted(links_, comm_, targets_, to, "a target", operation, [&](target_state& target, double weight) {
      // Straight from the caller's values when nothing waits (one pass:
      // no scaled copy), else through the queue.
      if (target.pending.empty() && weight == 1.0 && write_entry(target, kind, values, p, busy)) return;
      add_pending(target, kind, values, weight * p, static_cast<float>(weight));
      write_entry_if_room(target, busy);
    });
  }

  // Writes what is pending where the targets have room (and the links
  // are free).
  void write_pending() {
    links_.rethrow_if_failed();
    if (!any_pending()) return;
    device_.in_pass([&] {
      links_.each_live(targets_, [&](target_state& target) {
        while (has_pending(target) && write_entry_if_room(target, link_busy::keep_pending)) {}
      });
    });
  }

  bool has_pending(const target_state& target) const { return !target.pending.empty() && !links_.lost(target.rank); }
  bool any_pending() const {
    return std::any_of(targets_.begin(), targets_.end(), [&](const target_state& t) { return has_pending(t); });
  }

  // Whether everything written so far is sent, the pending entries too.
  bool sent() {
    write_pending();
    bool all = true;
    links_.each_live(targets_,
                     [&](target_state& target) { all &= links_[target.rank].test() && !has_pending(target); });
    return all;
  }
  void wait_written() {
    links_.each_live(targets_, [&](target_state& target) { links_[target.rank].wait(comm_.deadline()); });
  }
  // Every entry written so far has landed at its target.
  void flush() {
    links_.each_live(targets_, [&](target_state& target) {
      links_[target.rank].flush(comm_.deadline());
      if (device_.active()) device_.link(target.rank).flush(comm_.deadline());
    });
  }

  // Whether every target has read every entry written to it so far (the
  // pending ones are written first).
  bool read_by_targets() {
    write_pending();
    bool all = true;
    links_.each_live(targets_, [&](target_state& target) {
      all &= !has_pending(target) && consumed_at_least(target, target.written);
    });
    return all;
  }

  // Whether an accumulate to the target would be written at once: nothing
  // waits here for it, the link has carried the last entry, the target has
  // room (its counter read without waiting). False for a target dropped
  // meanwhile.
  bool ready(target_state& target) {
    bool writable = false;
    if (!links_.lost(target.rank))
      links_.guarded([&] {
        writable = !has_pending(target) && room_for(target, entry_kind::accumulate, link_busy::keep_pending);
      });
    return writable;
  }

  // A dropped target: what waits for it goes.
  void drop(int rank) {
    for (target_state& target : targets_)
      if (target.rank == rank) {
        target.pending.clear();
        target.drained = {};
        target.quiescing = {};
      }
  }

 private:
  // Unordered, a put replaces what is pending for the target and an
  // accumulate adds to it (to a pending put too: put then accumulate is a
  // put of the sum). Ordered, every entry waits its turn.
  void add_pending(target_state& target, entry_kind kind, std::span<const float> values, double p, float scale) {
    if (device_.active()) return add_pending_on_device(target, kind, values, p, scale);
    const std::size_t elements = layout_.elements;
    if (ordered_ || kind == entry_kind::put || target.pending.empty()) {
      if (!ordered_) target.pending.clear();
      pending_entry& entry = target.pending.emplace_back(pending_entry{kind, {}, {}, p});
      entry.values.resize(elements);
      for (std::size_t k = 0; k < elements; ++k) entry.values[k] = scale * values[k];
      return;
    }
    pending_entry& entry = target.pending.back();
    for (std::size_t k = 0; k < elements; ++k) entry.values[k] += scale * values[k];
    entry.p += p;
  }
  // The same on the device (products and sums rounded as there).
  void add_pending_on_device(target_state& target, entry_kind kind, std::span<const float> values, double p,
                             float scale) {
    local_arithmetic& where = device_.arithmetic();
    const std::size_t elements = layout_.elements;
    if (ordered_ || kind == entry_kind::put || target.pending.empty()) {
      if (!ordered_ && !target.pending.empty()) {
        where.settle();  // no step may still use the memory about to go
        target.pending.clear();
      }
      pending_entry& entry = target.pending.emplace_back(pending_entry{kind, {}, where.kept(values.size_bytes()), p});
      where.multiply(values.data(), entry.device_values(), elements, scale);
      return;
    }
    pending_entry& entry = target.pending.back();
    auto* scaled = static_cast<float*>(where.scratch(values.size_bytes(), 1));
    where.multiply(values.data(), scaled, elements, scale);
    where.reduce_into(entry.device_values(), scaled, elements, dtype::float32, "sum", false);
    entry.p += p;
  }

  // Writes the oldest pending entry if the target has room for it.
  bool write_entry_if_room(target_state& target, link_busy busy) {
    const pending_entry& next = target.pending.front();
    const std::span<const float> values = device_.active()
                                              ? std::span<const float>(next.device_values(), layout_.elements)
                                              : std::span<const float>(next.values);
    if (!write_entry(target, next.kind, values, next.p, busy)) return false;
    target.pending.pop_front();
    return true;
  }

  // Writes an entry unless the target has no room for it yet or, with
  // keep_pending, the link still sends the previous one: a writer behind a
  // slow link then sends sums of its pushes at the link's pace instead of
  // waiting for it. True if it wrote.
  bool write_entry(target_state& target, entry_kind kind, std::span<const float> values, double p, link_busy busy) {
    if (!room_for(target, kind, busy)) return false;
    region& to = links_[target.rank];
    const std::uint64_t number = target.written + 1;
    to.wait(comm_.deadline());  // the staging buffer is free again
    const std::size_t at = target.offset + layout_.slot.entry_at(number);
    const entry_header header{kind, 0, number, p, payload_bytes()};
    to.increment(target.offset + begun_at);
    if (device_.active())
      write_entry_on_device(target, to, at, header, values);
    else
      write_entry_on_host(target, to, at, header, values);
    to.increment(target.offset + completed_at);
    target.written = number;
    traffic& counters = this_thread_traffic();
    counters.bytes_sent += sizeof header + header.payload_bytes;
    ++counters.messages_sent;
    return true;
  }

  // Header and payload written in place where the target's slot is mapped
  // here, else into the staging buffer and sent whole.
  void write_entry_on_host(target_state& target, region& to, std::size_t at, const entry_header& header,
                           std::span<const float> values) {
    std::byte* entry = entry_buffer(target, to, at);
    copy_racing(entry, &header, sizeof header);
    encode(target, values, std::span<std::byte>(entry + sizeof header, layout_.slot.payload_bytes));
    if (!to.mapped()) to.write(at, std::span<const std::byte>(entry, sizeof header + layout_.slot.payload_bytes));
  }

  // As on the host, with the payload encoded on the device and put into
  // the target's device region once `begun` landed (it may rewrite entry
  // number - 2's buffer), then flushed: the `completed` that follows
  // travels another transport, which a fence would not order.
  void write_entry_on_device(target_state& target, region& to, std::size_t at, const entry_header& header,
                             std::span<const float> values) {
    encode_on_device(target, values);
    device_.arithmetic().settle();  // whole before the transport reads it
    to.flush(comm_.deadline());
    std::byte* entry = entry_buffer(target, to, at);  // the header alone: the host slot has no payload
    copy_racing(entry, &header, sizeof header);
    if (!to.mapped()) to.write(at, std::span<const std::byte>(entry, sizeof header));
    auto& payload_link = device_.link(target.rank);
    payload_link.write(device_.layout().payload_at(target.device_offset, header.number),
                       std::span<const std::byte>(device_.on_network(target.device_staging), header.payload_bytes));
    payload_link.flush(comm_.deadline());
  }

  // Where entry `at` of the target's slot is written: in place where it is
  // mapped here, else the staging buffer (free: the link was waited on).
  std::byte* entry_buffer(target_state& target, region& to, std::size_t at) {
    if (std::byte* entry = to.mapped_at(at)) return entry;
    target.staging.resize(layout_.slot.entry_bytes());
    return target.staging.data();
  }

  std::size_t payload_bytes() const noexcept {
    return device_.active() ? device_.layout().payload_bytes : layout_.slot.payload_bytes;
  }

  // Whether this rank's next entry of `kind` can be written to the target
  // now. A dead target is found first: it reads no more, so "no room"
  // would keep the entry pending for good, and a writer that never waits
  // would never learn of the death.
  bool room_for(target_state& target, entry_kind kind, link_busy busy) {
    if (busy == link_busy::keep_pending && !links_[target.rank].test()) return false;
    if (links_.gone(target.rank)) links_.fail_gone(target.rank, "window write");
    const std::uint64_t number = target.written + 1;
    const std::uint64_t lag = ordered_ ? 1 : kind == entry_kind::accumulate ? 2 : number;
    return consumed_at_least(target, number > lag ? number - lag : 0, busy);
  }

  // Whether the target has applied `entries` of this rank's entries; its
  // counter is read again only when the one last read says no. With
  // keep_pending the read does not wait (over the network it is a round
  // trip, behind whatever the link carries): false until it comes back.
  bool consumed_at_least(target_state& target, std::uint64_t entries, link_busy busy = link_busy::wait) {
    if (target.consumed >= entries) return true;
    const std::size_t counter = target.offset + consumed_at;
    if (busy == link_busy::wait) {
      target.consumed = links_[target.rank].load(counter, comm_.deadline());
    } else {
      std::uint64_t consumed = 0;
      if (!links_[target.rank].try_load(counter, consumed)) return false;
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
  void encode_on_device(target_state& target, std::span<const float> values) {
    local_arithmetic& where = device_.arithmetic();
    if (!codec_) {
      where.copy(target.device_staging, values.data(), values.size_bytes());
    } else if (target.device_residual != nullptr) {
      auto* work = static_cast<float*>(where.scratch(values.size_bytes(), 0));
      where.feedback_encode(device_.spec(), values.data(), target.device_residual, work, target.device_staging,
                            layout_.elements);
    } else {
      where.encode(device_.spec(), values.data(), target.device_staging, layout_.elements);
    }
  }

  Communicator& comm_;  // the window's own
  neighbour_links<Communicator>& links_;
  device_slots<Communicator>& device_;
  const codec::any_codec& codec_;
  const region_layout& layout_;
  bool ordered_;
  std::vector<target_state> targets_;
};

}  // namespace chorus::windows
