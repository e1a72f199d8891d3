// device_slots: whether a window keeps its slots' payloads in device
// memory, and the device's side of its calls when it does (window.hpp,
// "Device slots"). Chosen at creation where every rank's tensor is device
// memory the router's direct path takes with the window's codec (else
// every rank stages through host slots: the layouts must agree, and the
// debug report says why). Then the payloads live in a device region
// (device_region.hpp) and are encoded, decoded and combined by the
// device's arithmetic, which a window call holds for its whole length:
// one pass through the router's direct path however deep the calls nest.
#pragma once

#include <chorus/codec/any_codec.hpp>
#include <chorus/codec/spec.hpp>
#include <chorus/core/error.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/local_arithmetic.hpp>
#include <chorus/route/memory_router.hpp>
#include <chorus/window/device_region.hpp>
#include <chorus/window/neighbour_links.hpp>
#include <chorus/window/neighbour_states.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace chorus::windows {

template <class Communicator>
class device_slots {
  using transport_type = typename Communicator::transport_type;

 public:
  explicit device_slots(Communicator& comm) : comm_(comm) {}
  device_slots(const device_slots&) = delete;
  device_slots& operator=(const device_slots&) = delete;

  // Whether this rank can keep its slots in device memory: its tensor is
  // device memory the router's direct path takes with the codec (an empty
  // reason: host memory, nothing to report).
  path_report path(std::span<const float> initial, const codec::any_codec& codec) {
    memory_router* router = routed(initial);
    if (router == nullptr) return {};
    router_ = router;
    view_ = {initial.data(), initial.size_bytes(), buffer_use::read_write};
    const network_memory network = network_of(comm_);
    if (!codec) return router->direct_path(view_, dtype::float32, "sum", network);
    std::optional<codec_spec> spec;
    codec::visit(codec, [&](const auto& c) {
      if constexpr (codec::describable<std::remove_cvref_t<decltype(c)>>) spec = codec::spec_of(c);
    });
    if (!spec) return {false, staged_because("window slots in device memory with " + std::string(codec.name()))};
    spec_ = *spec;
    return router->direct_path(view_, spec_, network);
  }

  // Device slots where every rank takes them (none `refusing`), else host
  // slots for all; the debug report says which. With device slots the
  // host region keeps counters and headers alone.
  void choose(const path_report& mine, int refusing, region_layout& host) {
    chosen_ = refusing < 0;
    const std::size_t bytes = host.elements * sizeof(float);
    if (chosen_) {
      layout_ = {bytes, host.slot.payload_bytes};
      host.slot = slot_layout{0};
      host.published = slot_layout{0};
    }
    if (mine.reason.empty()) return;
    if (chosen_)
      report_path(comm_, "window", bytes, "direct: its slots in device memory", record::path::direct);
    else if (mine.direct)
      report_path(comm_, "window", bytes,
                  "staged: rank " + std::to_string(refusing) +
                      " cannot keep its window slots in device memory (its tensor, its UCX or its kernels)");
    else
      report_path(comm_, "window", bytes, mine.reason);
  }
  bool chosen() const noexcept { return chosen_; }
  // Whether the device region exists: the window's calls go through it.
  bool active() const noexcept { return region_.has_value(); }

  // The device region for `sources` slots, its links dropped with the
  // host ones. In a pass (on_device()).
  void make_region(std::size_t sources, neighbour_links<Communicator>& links) {
    region_.emplace(arithmetic(), comm_.transport(), layout_.bytes(sources));
    links.include_device_links(*region_);
    view_ = {region_->data(), region_->size(), buffer_use::read_write};
  }

  // Runs body() with the device's arithmetic at hand (arithmetic()): one
  // pass through the router's direct path per window call, however deep
  // the calls nest (the window keeps one call at a time).
  template <class Body>
  void on_device(Body&& body) {
    if (where_ != nullptr) return body();
    router_->through_direct(
        view_,
        [&](local_arithmetic& where) {
          const detail::scoped_value<local_arithmetic*> held(where_, &where);
          body();
        },
        detail::waiting_on(comm_));
  }
  // body() in a pass where the slots are in device memory (joining the
  // pass under way), plainly where they are not.
  template <class Body>
  void in_pass(Body&& body) {
    if (active())
      on_device(body);
    else
      body();
  }
  local_arithmetic& arithmetic() const noexcept { return *where_; }
  // The device's work so far is done (before a caller reads a value).
  void settle() {
    if (active()) arithmetic().settle();
  }

  void require(std::span<const float> values, const char* operation) const {
    if (router_->kind_of(values.data()) != memory_kind::cuda_device)
      throw window_error(comm_, errc::invalid_argument,
                         "a window whose slots are in device memory takes device tensors", -1,
                         std::string("window ") + operation);
  }
  // The address the transport reads a device pointer at.
  std::byte* on_network(void* device_pointer) const {
    return static_cast<std::byte*>(arithmetic().network_address(device_pointer));
  }

  // The published tensor, by the slot protocol publish_entry(payload
  // bytes, write_payload) runs on the host: the payload copied on the
  // device. Its own pass: publish() may come from a second thread.
  template <class PublishEntry>
  void publish(std::span<const float> values, PublishEntry&& publish_entry) {
    require(values, "publish");
    const auto publish_with = [&](local_arithmetic& where) {
      publish_entry(layout_.tensor_bytes, [&](std::uint64_t number, std::byte*) {
        where.copy(region_->data() + layout_.published_at(number), values.data(), layout_.tensor_bytes);
        where.settle();
      });
    };
    router_->through_direct(view_, publish_with, detail::waiting_on(comm_));
  }

  const device_layout& layout() const noexcept { return layout_; }
  const codec_spec& spec() const noexcept { return spec_; }
  device_region<transport_type>& region() { return *region_; }
  // Each neighbour's device region (their cards traded).
  std::vector<std::byte> card() const { return region_->card(); }
  void reach(int rank, std::span<const std::byte> card) { region_->reach(rank, comm_.world_rank(rank), card); }
  auto& link(int rank) { return region_->link(rank); }

  void retire() noexcept {
    if (region_) region_->retire();
  }
  void release() { region_.reset(); }

 private:
  Communicator& comm_;  // the window's own
  memory_router* router_ = nullptr;
  codec_spec spec_{};  // the codec as its kernels know it
  bool chosen_ = false;
  device_layout layout_{};
  std::optional<device_region<transport_type>> region_;
  routed_buffer view_{};               // the tensor, then the region: what a pass is asked for
  local_arithmetic* where_ = nullptr;  // the arithmetic of the call under way
};

}  // namespace chorus::windows
