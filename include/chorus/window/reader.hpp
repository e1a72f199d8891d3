// reader: a window rank's side as a reader, of the slots its sources write
// into and of their published tensors. Per source: the value its entries
// sum to (decoded), its p, the entries applied. Reads happen on the
// reader's thread, at update(), collect() and get(), and never see a torn
// tensor: an entry is copied, then used only if its writer had not begun
// rewriting it meanwhile (slot.hpp), else copied again. Cost: a read
// copies at most two entries per source (the newest, and the accumulate
// before it when that one is unread); a get copies the source's whole
// published tensor. Memory: a value and a spare per source.
#pragma once

#include <chorus/codec/any_codec.hpp>
#include <chorus/core/error.hpp>
#include <chorus/route/local_arithmetic.hpp>
#include <chorus/window/device_slots.hpp>
#include <chorus/window/neighbour_links.hpp>
#include <chorus/window/neighbour_states.hpp>
#include <chorus/window/slot.hpp>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace chorus::windows {

template <class Communicator>
class reader {
  using region = typename neighbour_links<Communicator>::region;

 public:
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

  reader(Communicator& comm, neighbour_links<Communicator>& links, device_slots<Communicator>& device,
         const codec::any_codec& codec, const region_layout& layout)
      : comm_(comm), links_(links), device_(device), codec_(codec), layout_(layout) {}
  reader(const reader&) = delete;
  reader& operator=(const reader&) = delete;

  // The next source, ascending: its slot follows the previous one's.
  void add_source(int rank) {
    const std::size_t position = sources_.size();
    source_state state;
    state.rank = rank;
    state.offset = layout_.slot_at(position);
    state.device_offset = device_.layout().slot_at(position);
    if (!device_.chosen()) state.value.assign(layout_.elements, 0.0f);
    sources_.push_back(std::move(state));
  }
  // This rank's exposed region, where its sources' slots are.
  void read_from(std::span<std::byte> own) { own_ = own.data(); }
  // Device slots: each source's value, spare and entry copies in device
  // memory. In a pass (device_slots::on_device).
  void make_device_memory() {
    local_arithmetic& where = device_.arithmetic();
    const std::size_t tensor = device_.layout().published_entry(), payload = device_.layout().slot_entry();
    for (source_state& source : sources_) {
      source.memory = where.kept(2 * tensor + 2 * payload);
      auto* base = static_cast<std::byte*>(source.memory.get());
      source.device_value = reinterpret_cast<float*>(base);
      source.device_spare = reinterpret_cast<float*>(base + tensor);
      source.device_copies = base + 2 * tensor;
    }
  }

  std::vector<source_state>& sources() noexcept { return sources_; }
  const std::vector<source_state>& sources() const noexcept { return sources_; }
  const source_state& source(int rank, const char* operation) const {
    return named(comm_, sources_, rank, "a source", operation);
  }
  std::size_t live_sources() const {
    return static_cast<std::size_t>(
        std::count_if(sources_.begin(), sources_.end(), [&](const source_state& s) { return !links_.lost(s.rank); }));
  }

  // Entries landed in the source's slot since the last update or collect
  // (gets count one each).
  std::uint64_t version(int rank, const char* operation) const { return new_entries(source(rank, operation)); }
  // Whether every source in `watched` not lost has `count` new versions;
  // a dead one is a peer failure (or dropped).
  bool have_versions(const std::vector<int>& watched, std::uint64_t count) {
    bool all = true;
    for (int rank : watched) {
      const source_state& state = source(rank, "wait_versions");
      if (links_.lost(rank)) continue;
      const bool dead = links_.gone(rank);  // first: a relay settles after applying all it had
      if (new_entries(state) >= count) continue;
      links_.guarded([&] {
        if (dead) links_.fail_gone(rank, "window wait_versions");
      });
      all &= links_.lost(rank);
    }
    return all;
  }

  // Applies what landed in every live source's slot.
  void read_all() {
    links_.each_live(sources_, [&](source_state& state) { read_new(state); });
  }

  // Reads each source's published tensor into its value, times its weight
  // (every source with weight 1 when `from` is empty).
  void get(const std::vector<neighbour_weight>& from) {
    device_.in_pass([&] {
      for_each_weighted(links_, comm_, sources_, from, "a source", "get", [&](source_state& state, double weight) {
        read_new(state);  // entries before the get are superseded by it
        read_published(state, weight);
      });
    });
  }

  // on_slot(source, value, p) for every live source after reading what
  // landed; with reset the values (and p's) become 0 afterwards.
  template <class OnSlot>
  void collect(OnSlot&& on_slot, bool reset) {
    device_.in_pass([&] {
      read_all();
      device_.settle();
      for (source_state& state : sources_) {
        if (links_.lost(state.rank)) continue;
        on_slot(state.rank, value_of(state), state.p);
        settle(state, reset);
      }
    });
  }
  // The same for the sources named, in their order.
  template <class OnSlot>
  void collect_from(std::span<const int> from, OnSlot&& on_slot, bool reset) {
    device_.in_pass([&] {
      for (int rank : from) {
        source_state& state = named(comm_, sources_, rank, "a source", "collect_from");
        if (!links_.lost(rank)) links_.guarded([&] { read_new(state); });
        if (links_.lost(rank)) continue;
        device_.settle();
        on_slot(state.rank, value_of(state), state.p);
        settle(state, reset);
      }
    });
  }

  // out = self_weight * out + sum_s weight_s * value_s over the sources in
  // `from` (the others weigh 0), the sum in double, rounded once; returns
  // p combined likewise with this rank's `p`. No self_weight: uniform
  // weights over this rank and its live sources. `out` is where the slots
  // are (device memory on device slots, in a pass).
  double update(std::span<float> out, std::optional<double> self_weight, std::vector<neighbour_weight> from, bool reset,
                double p) {
    if (!self_weight) {
      self_weight = 1.0 / static_cast<double>(live_sources() + 1);
      for (const source_state& state : sources_)
        if (!links_.lost(state.rank)) from.push_back({state.rank, *self_weight});
    }
    for (const neighbour_weight& entry : from) (void)source(entry.rank, "update");
    if (device_.active()) return update_on_device(out, *self_weight, from, reset, p);
    std::vector<double> combined(out.size());
    for (std::size_t k = 0; k < out.size(); ++k) combined[k] = *self_weight * static_cast<double>(out[k]);
    double combined_p = *self_weight * p;
    collect(
        [&](int rank, std::span<const float> value, double source_p) {
          const double weight = weight_of(from, rank);
          if (weight == 0.0) return;
          for (std::size_t k = 0; k < out.size(); ++k) combined[k] += weight * static_cast<double>(value[k]);
          combined_p += weight * source_p;
        },
        reset);
    for (std::size_t k = 0; k < out.size(); ++k) out[k] = static_cast<float>(combined[k]);
    return combined_p;
  }

  // Applies the entries landed in the source's slot since the last read,
  // copying again while the writer rewrites what it copies (bounded: a
  // writer that died mid-entry is a peer failure, a live one finishes).
  void read_new(source_state& state) {
    device_.in_pass([&] {
      if (try_read_new(state)) return;
      comm_.poll_until(
          [&] {
            links_.serve_relay_if_here();
            return try_read_new(state);
          },
          "window read", state.rank);
    });
  }

 private:
  std::uint64_t new_entries(const source_state& state) const { return completed(state) - state.seen + state.gets; }

  double update_on_device(std::span<float> out, double self_weight, const std::vector<neighbour_weight>& from,
                          bool reset, double p) {
    local_arithmetic& where = device_.arithmetic();
    const std::size_t elements = layout_.elements;
    auto* sum = static_cast<double*>(where.scratch(elements * sizeof(double), 2));
    where.weigh(sum, out.data(), elements, self_weight, true);
    double combined_p = self_weight * p;
    collect(
        [&](int rank, std::span<const float> value, double source_p) {
          const double weight = weight_of(from, rank);
          if (weight == 0.0) return;
          where.weigh(sum, value.data(), elements, weight, false);
          combined_p += weight * source_p;
        },
        reset);
    where.narrow(sum, out.data(), elements);
    return combined_p;
  }

  // A source's value, where it lives (device memory on device slots).
  std::span<const float> value_of(const source_state& state) const {
    return device_.active() ? std::span<const float>(state.device_value, layout_.elements)
                            : std::span<const float>(state.value);
  }

  std::byte* slot_of(const source_state& state) const { return own_ + state.offset; }
  std::uint64_t completed(const source_state& state) const {
    return counter_at(slot_of(state), completed_at).load(std::memory_order_acquire);
  }
  std::size_t payload_bytes() const noexcept {
    return device_.active() ? device_.layout().payload_bytes : layout_.slot.payload_bytes;
  }

  // True once the slot's new entries are applied (or there are none);
  // false when the copy was not whole. Copied and checked before use: the
  // newest entry (copy 0) and, when it is an accumulate whose predecessor
  // is unread, that one too (copy 1). On device slots copies_ holds the
  // headers alone and the payloads are copied on the device.
  bool try_read_new(source_state& state) {
    std::byte* slot = slot_of(state);
    const std::size_t entry_bytes = sizeof(entry_header) + layout_.slot.payload_bytes;
    copies_.resize(2 * entry_bytes);
    const std::uint64_t newest = counter_at(slot, completed_at).load(std::memory_order_acquire);
    if (newest == state.consumed) return true;
    if (!device_.active() && !codec_ && try_read_put_in_place(state, slot, newest)) return true;
    const auto copy_entry = [&](std::size_t index, std::uint64_t number) {
      copy_racing(copies_.data() + index * entry_bytes, slot + layout_.slot.entry_at(number), entry_bytes);
      if (device_.active())
        device_.arithmetic().copy(payload_copy(state, index, entry_bytes),
                                  device_.region().data() + device_.layout().payload_at(state.device_offset, number),
                                  device_.layout().payload_bytes);
    };
    copy_entry(0, newest);
    std::uint64_t oldest = newest;
    entry_header head;
    std::memcpy(&head, copies_.data(), sizeof head);
    if (head.kind == entry_kind::accumulate && newest - 1 > state.consumed) copy_entry(1, oldest = newest - 1);
    device_.settle();  // the payloads' copies are whole before `begun` says whether they were rewritten meanwhile
    std::atomic_thread_fence(std::memory_order_acquire);
    if (counter_at(slot, begun_at).load(std::memory_order_acquire) >= oldest + 2) {
      if (links_.gone(state.rank)) links_.fail_gone(state.rank, "window read (its writer died mid-entry)");
      return false;
    }
    const auto [last, first] =
        checked_entries(state, copies_.data(), copies_.data() + entry_bytes, newest, oldest, payload_bytes());
    if (oldest != newest) apply_one(state, first, payload_copy(state, 1, entry_bytes));
    apply_one(state, last, payload_copy(state, 0, entry_bytes));
    state.consumed = newest;
    counter_at(slot, consumed_at).store(newest, std::memory_order_release);
    return true;
  }

  // Where copy `index`'s payload is: after its header here, or in the
  // source's device copies.
  std::byte* payload_copy(source_state& state, std::size_t index, std::size_t entry_bytes) {
    if (device_.active()) return state.device_copies + index * device_.layout().slot_entry();
    return copies_.data() + index * entry_bytes + sizeof(entry_header);
  }

  // Without a codec, a put entry is copied once, into the spare value that
  // then becomes the value: false when the newest entry is not a put, or
  // was rewritten meanwhile (the value is untouched; the general path reads).
  bool try_read_put_in_place(source_state& state, std::byte* slot, std::uint64_t newest) {
    const std::byte* entry = slot + layout_.slot.entry_at(newest);
    entry_header head;
    copy_racing(&head, entry, sizeof head);
    if (head.kind != entry_kind::put) return false;
    state.spare.resize(layout_.elements);
    copy_racing(state.spare.data(), entry + sizeof head, layout_.slot.payload_bytes);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (counter_at(slot, begun_at).load(std::memory_order_acquire) >= newest + 2) return false;
    (void)checked_header(reinterpret_cast<const std::byte*>(&head), newest, layout_.slot.payload_bytes, "window read",
                         comm_.world_rank(comm_.rank()), comm_.world_rank(state.rank));
    state.value.swap(state.spare);
    state.p = head.p;
    state.consumed = newest;
    counter_at(slot, consumed_at).store(newest, std::memory_order_release);
    return true;
  }

  // The headers of whole copies of entries newest and (when it differs)
  // oldest, checked: an accumulate must not have overwritten an entry not
  // yet read.
  std::pair<entry_header, entry_header> checked_entries(const source_state& state, const std::byte* newest_copy,
                                                        const std::byte* oldest_copy, std::uint64_t newest,
                                                        std::uint64_t oldest, std::size_t bytes) const {
    const int me = comm_.world_rank(comm_.rank()), peer = comm_.world_rank(state.rank);
    const auto overwritten = [&] {
      return window_error(comm_, errc::mismatch, "window slot: an accumulate overwrote an entry not yet read",
                          state.rank, "window read");
    };
    const entry_header last = checked_header(newest_copy, newest, bytes, "window read", me, peer);
    if (last.kind == entry_kind::accumulate && oldest == newest && newest - 1 > state.consumed) throw overwritten();
    entry_header first{};
    if (oldest != newest) {
      first = checked_header(oldest_copy, oldest, bytes, "window read", me, peer);
      if (first.kind == entry_kind::accumulate && oldest - 1 > state.consumed) throw overwritten();
    }
    return {last, first};
  }

  void apply_one(source_state& state, const entry_header& header, const std::byte* payload) {
    if (device_.active()) return apply_on_device(state, header, payload);
    const std::span<const std::byte> bytes(payload, layout_.slot.payload_bytes);
    if (header.kind == entry_kind::put) {
      codec_.decode(bytes, state.value);
      state.p = header.p;
    } else {
      codec_.decode_add(bytes, state.value);
      state.p += header.p;
    }
  }
  void apply_on_device(source_state& state, const entry_header& header, const std::byte* payload) {
    local_arithmetic& where = device_.arithmetic();
    const bool put = header.kind == entry_kind::put;
    if (codec_)
      where.decode(device_.spec(), payload, state.device_value, layout_.elements, !put);
    else if (put)
      where.copy(state.device_value, payload, layout_.elements * sizeof(float));
    else
      where.reduce_into(state.device_value, payload, layout_.elements, dtype::float32, "sum", false);
    state.p = put ? header.p : state.p + header.p;
  }

  // After an update or collect: versions count from here; with reset the
  // value and p become 0.
  void settle(source_state& state, bool reset) {
    state.seen = state.consumed;
    state.gets = 0;
    if (!reset) return;
    if (device_.active())
      device_.arithmetic().zero(state.device_value, layout_.elements);
    else
      std::fill(state.value.begin(), state.value.end(), 0.0f);
    state.p = 0.0;
  }

  // A source's published tensor, copied whole (the same double buffer: it
  // is copied again when rewritten meanwhile), times `weight`.
  void read_published(source_state& state, double weight) {
    if (!try_read_published(state, weight))
      comm_.poll_until([&] { return try_read_published(state, weight); }, "window get", state.rank);
  }

  // The tensor is copied once, into the spare value that then becomes the
  // value; a copy that was not whole is copied again.
  bool try_read_published(source_state& state, double weight) {
    region& from = links_[state.rank];
    if (links_.gone(state.rank)) links_.fail_gone(state.rank, "window get");
    const std::uint64_t newest = from.load(completed_at, comm_.deadline());
    std::byte head[sizeof(entry_header)];
    from.read(layout_.published.entry_at(newest), head, comm_.deadline());
    if (device_.active())
      read_published_on_device(state, newest);
    else
      read_published_on_host(from, state, newest);
    if (from.load(begun_at, comm_.deadline()) >= newest + 2) return false;
    const entry_header header = checked_header(head, newest, layout_.elements * sizeof(float), "window get",
                                               comm_.world_rank(comm_.rank()), from.world_rank());
    if (weight != 1.0) scale_spare(state, weight);
    swap_spare(state);
    state.p = weight * header.p;
    ++state.gets;
    return true;
  }

  // The source's published payload, into the spare value (the value once whole).
  void read_published_on_host(region& from, source_state& state, std::uint64_t newest) {
    state.spare.resize(layout_.elements);
    from.read(layout_.published.entry_at(newest) + sizeof(entry_header), std::as_writable_bytes(std::span(state.spare)),
              comm_.deadline());
  }
  // The same, by RMA into the spare device value.
  void read_published_on_device(source_state& state, std::uint64_t newest) {
    device_.arithmetic().settle();  // no step still uses the spare value
    device_.link(state.rank)
        .read(device_.layout().published_at(newest),
              std::span<std::byte>(device_.on_network(state.device_spare), device_.layout().tensor_bytes),
              comm_.deadline());
  }
  void swap_spare(source_state& state) {
    if (device_.active())
      std::swap(state.device_value, state.device_spare);
    else
      state.value.swap(state.spare);
  }
  // spare *= weight, in double, rounded once.
  void scale_spare(source_state& state, double weight) {
    if (!device_.active()) {
      for (float& value : state.spare) value = static_cast<float>(weight * value);
      return;
    }
    local_arithmetic& where = device_.arithmetic();
    auto* sum = static_cast<double*>(where.scratch(layout_.elements * sizeof(double), 2));
    where.weigh(sum, state.device_spare, layout_.elements, weight, true);
    where.narrow(sum, state.device_spare, layout_.elements);
  }

  Communicator& comm_;  // the window's own
  neighbour_links<Communicator>& links_;
  device_slots<Communicator>& device_;
  const codec::any_codec& codec_;
  const region_layout& layout_;
  std::byte* own_ = nullptr;  // this rank's exposed region
  std::vector<source_state> sources_;
  std::vector<std::byte> copies_;  // entries copied out of a slot, checked before use
};

}  // namespace chorus::windows
