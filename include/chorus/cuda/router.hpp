// chorus::cuda::router: device buffers through every front door.
//
//   chorus::cuda::router gpu(chorus::cuda::runtime());        // cuda/runtime.hpp
//   chorus::cuda::route_front_doors routing(gpu);              // for the whole process, until it goes
//   chorus::cuda::stream_scope ordered(stream);                // this thread's calls order on `stream`
//   chorus::allreduce(comm, std::span(device_grads, n));       // staged through pinned memory
//
// Staged path (any UCX): each device buffer a call reads is copied into
// pinned host memory (cuda/staging.hpp, after the stream's pending work),
// the host algorithm runs there, and each buffer it writes is copied back
// (the stream then waits for the copies). Pinned buffers are used in place
// once the stream's pending work is done. The results have the same bits as
// the host path, and g++ alone compiles it: no kernels.
//
// Streams: a call orders on the stream of the innermost stream_scope of its
// thread, or on the legacy default stream (null); a non-blocking collective
// carries its caller's stream to the worker that runs it.
//
// Cost per call: the host algorithm's, plus (bytes read + bytes written) /
// copy bandwidth; the copies of different chunks overlap each other.
//
// Direct path (cuda/path.hpp: a UCX that moves CUDA memory, and device
// kernels given as `compute`): a collective hands the device buffers to the
// transport as they are and runs its local computation (reductions, a compressed
// collective's scaling and codecs) on the device, on the caller's stream;
// no copies. Its cost is the host algorithm's with those steps at device
// bandwidth, plus one stream synchronisation per piece sent (the transport
// must not read a piece before the step that wrote it has landed).
#pragma once

#include <chorus/cuda/device_compute.hpp>
#include <chorus/cuda/part_staging.hpp>
#include <chorus/cuda/path.hpp>
#include <chorus/cuda/staging.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <vector>

namespace chorus::cuda {

// The stream this thread's calls order on; null: the legacy default stream.
inline stream_handle current_stream() noexcept { return detail::thread_stream(); }

// Orders this thread's chorus calls on `stream` until the scope ends.
using stream_scope = thread_stream_scope;

namespace detail {

// The direct path's local computation: kernels on the caller's stream, scratch
// in device memory, a wait on the stream before the transport reads.
class device_arithmetic final : public local_arithmetic {
 public:
  // compute: null for a collective that only moves bytes.
  device_arithmetic(device& on, device_compute* compute, const device::lease& held, stream_handle stream,
                    memory_router::waiter wait)
      : on_(on), compute_(compute), held_(held), stream_(stream), wait_(wait) {}

  void* scratch(std::size_t bytes, std::size_t slot) override {
    if (on_.device_scratch_bytes(held_, slot) < bytes) settle();  // growing frees memory a kernel may still use
    return on_.device_scratch(held_, bytes, slot).data();
  }
  void copy(void* to, const void* from, std::size_t bytes) override {
    on_.operations().copy_async(to, from, bytes, stream_);
  }
  void reduce_into(void* accumulate, const void* incoming, std::size_t n, dtype type, std::string_view op,
                   bool incoming_is_lower) override {
    kernels().reduce_into(accumulate, incoming, n, type, op, incoming_is_lower, stream_);
  }
  void finalize(void* values, std::size_t n, dtype type, std::string_view op, std::size_t contributions) override {
    kernels().finalize(values, n, type, op, contributions, stream_);
  }
  void multiply(const float* in, float* out, std::size_t n, float factor) override {
    kernels().multiply(in, out, n, factor, stream_);
  }
  void divide(float* values, std::size_t n, float divisor) override { kernels().divide(values, n, divisor, stream_); }
  void zero(float* values, std::size_t n) override { kernels().zero(values, n, stream_); }
  void weigh(double* sum, const float* in, std::size_t n, double weight, bool first) override {
    kernels().weigh(sum, in, n, weight, first, stream_);
  }
  void narrow(const double* sum, float* out, std::size_t n) override { kernels().narrow(sum, out, n, stream_); }
  void encode(const codec_spec& codec, const float* in, void* out, std::size_t n) override {
    kernels().encode(codec, in, out, n, stream_);
  }
  void decode(const codec_spec& codec, const void* in, float* out, std::size_t n, bool accumulate) override {
    kernels().decode(codec, in, out, n, accumulate, stream_);
  }
  void feedback_encode(const codec_spec& codec, const float* in, float* residual, float* work, void* out,
                       std::size_t n) override {
    kernels().feedback_encode(codec, in, residual, work, out, n, stream_);
  }
  std::shared_ptr<void> kept(std::size_t bytes) override {
    device_operations& ops = on_.operations();
    auto* memory = static_cast<float*>(ops.allocate_device(std::max<std::size_t>(bytes, sizeof(float))));
    std::shared_ptr<void> owned(memory, [&ops](void* p) { ops.free_device(p); });
    kernels().zero(memory, bytes / sizeof(float), stream_);
    return owned;
  }
  void settle() override {
    device_operations& ops = on_.operations();
    const event_handle done = held_.set().events.front();
    ops.record(done, stream_);
    wait_([&] { return ops.completed(done); }, "waiting for the device's reductions");
  }
  void* network_address(void* data) const override { return on_.operations().network_address(data); }

 private:
  device_compute& kernels() const {
    if (compute_ == nullptr) throw error(errc::invalid_argument, "direct path: arithmetic without device kernels");
    return *compute_;
  }

  device& on_;
  device_compute* compute_;
  const device::lease& held_;
  stream_handle stream_;
  memory_router::waiter wait_;
};

}  // namespace detail

class router final : public memory_router {
 public:
  // compute: the device kernels for the direct path (none: always staged).
  explicit router(device& on, staging_options options = {}, device_compute* compute = nullptr,
                  path_setting path = path_from_environment())
      : on_(on), options_(options), compute_(compute), path_(path) {
    stager check(on_, options_, nullptr);  // bad options fail here, not in the first collective
  }

  device& on() noexcept { return on_; }
  memory_kind kind_of(const void* data) const override { return on_.kind_of(data); }

  void through_host(std::span<const routed_buffer> buffers, function_ref<void(std::span<void* const>)> body,
                    waiter wait) override {
    stager copies(on_, options_, current_stream());
    std::vector<memory_kind> kinds;
    std::vector<std::size_t> offsets;
    std::size_t staged_bytes = 0;
    for (const routed_buffer& buffer : buffers) {
      kinds.push_back(buffer.bytes == 0 ? memory_kind::host : on_.kind_of(buffer.data));
      offsets.push_back(staged_bytes);
      if (kinds.back() == memory_kind::cuda_device) staged_bytes += aligned(buffer.bytes);
    }
    device::lease held = on_.acquire(staged_bytes, copies.depth());
    std::vector<void*> host(buffers.size());
    bool ordered_after_caller = false;
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      host[i] = const_cast<void*>(buffers[i].data);
      if (kinds[i] != memory_kind::cuda_device) continue;
      host[i] = held.set().pinned.data() + offsets[i];
      if (buffers[i].use == buffer_use::write) continue;
      copies.copy_after_caller(held.set(), host[i], buffers[i].data, buffers[i].bytes, wait);
      ordered_after_caller = true;
    }
    // Pinned buffers, and device buffers only written, must not be touched
    // before the stream's pending work (a kernel still reading them) is done.
    if (!ordered_after_caller) copies.wait_for_caller(held.set(), wait);
    body(host);
    for (std::size_t i = 0; i < buffers.size(); ++i)
      if (kinds[i] == memory_kind::cuda_device && buffers[i].use != buffer_use::read)
        copies.copy_before_caller(held.set(), const_cast<void*>(buffers[i].data), host[i], buffers[i].bytes, wait);
  }

  // One device buffer staged part by part as the algorithm reports its
  // progress (part_staging.hpp); anything else as through_host.
  void through_host_in_parts(const routed_buffer& buffer, function_ref<void(void*)> body, waiter wait) override {
    if (buffer.bytes == 0 || on_.kind_of(buffer.data) != memory_kind::cuda_device)
      return memory_router::through_host_in_parts(buffer, body, wait);
    stager copies(on_, options_, current_stream());
    device::lease held = on_.acquire(buffer.bytes, copies.depth());
    part_staging parts(copies, held.set(), static_cast<std::byte*>(const_cast<void*>(buffer.data)), buffer.bytes, wait);
    parts.start();
    {
      const staging_hooks_scope reporting(&parts);
      body(parts.host());
    }
    parts.finish();
  }

  path_report direct_path(const routed_buffer& buffer, dtype type, std::string_view op,
                          const network_memory& network) const override {
    if (buffer.bytes == 0 || on_.kind_of(buffer.data) != memory_kind::cuda_device)
      return {false, "staged: not device memory"};
    const bool reduces = !op.empty();  // a collective that only moves bytes needs no kernels
    return choose_path(path_, network_facts(buffer, network, !reduces || compute_ != nullptr,
                                            !reduces || (compute_ != nullptr && compute_->reduces(type, op))));
  }

  path_report direct_path(const routed_buffer& buffer, const codec_spec& codec,
                          const network_memory& network) const override {
    if (buffer.bytes == 0 || on_.kind_of(buffer.data) != memory_kind::cuda_device)
      return {false, "staged: not device memory"};
    return choose_path(
        path_, network_facts(buffer, network, compute_ != nullptr, compute_ != nullptr && compute_->encodes(codec)));
  }

  // The caller's pending work on its stream is done before the transport
  // first reads the buffer; the reductions then run on that stream.
  void through_direct(const routed_buffer& buffer, function_ref<void(local_arithmetic&)> body, waiter wait) override {
    (void)buffer;
    const device::lease held = on_.acquire(0, 1);
    detail::device_arithmetic steps(on_, compute_, held, current_stream(), wait);
    steps.settle();
    body(steps);
    steps.settle();  // the scratch goes back with the lease: no kernel may still read it
  }

  void copy(void* to, const void* from, std::size_t bytes, waiter wait) override {
    if (bytes == 0) return;
    // Chunks on several streams keep the host link's copy engines busy;
    // within the device one copy already runs at full bandwidth, and chunks
    // would only add launches (docs/gpu.md has the measurement).
    const bool within_device =
        on_.kind_of(to) == memory_kind::cuda_device && on_.kind_of(from) == memory_kind::cuda_device;
    stager copies(on_, within_device ? staging_options{bytes, 1} : options_, current_stream());
    device::lease held = on_.acquire(0, copies.depth());
    copies.copy_after_caller(held.set(), to, from, bytes, wait);  // returns once landed: later work sees it
  }

 private:
  static std::size_t aligned(std::size_t bytes) noexcept { return (bytes + 255) / 256 * 256; }

  // What the network says of `buffer`: the transport is asked how it
  // registers the buffer only where the choice can still be direct (a
  // registration per new buffer: not for calls that stage anyway).
  path_facts network_facts(const routed_buffer& buffer, const network_memory& network, bool have_kernels,
                           bool kernels_take_call) const {
    device_operations& ops = on_.operations();
    path_facts facts{ops.network_reaches_device(network.moved), have_kernels, kernels_take_call};
    if (path_ != path_setting::staged && facts.network_reaches_device && network.registered_as) {
      void* address = ops.network_address(const_cast<void*>(buffer.data));
      facts.buffer_registered_as_device = ops.network_registers_device(network.registered_as(address, buffer.bytes));
    }
    return facts;
  }

  device& on_;
  staging_options options_;
  device_compute* compute_;
  path_setting path_;
};

// Installs `r` for every front door of the process until the scope ends
// (the one installed before comes back).
class route_front_doors {
 public:
  explicit route_front_doors(router& r) noexcept : previous_(install_memory_router(&r)) {}
  ~route_front_doors() { install_memory_router(previous_); }
  route_front_doors(const route_front_doors&) = delete;
  route_front_doors& operator=(const route_front_doors&) = delete;

 private:
  memory_router* previous_;
};

}  // namespace chorus::cuda
