// Where a compressed collective's local computation runs: its buffers, prescaling,
// encoding and decoding. host_codec_compute runs them on the host with the
// CPU codec (or its error feedback); routed_codec_compute runs them through a
// router's local_arithmetic, where the memory lives (the direct path: device
// kernels with the CPU codec's bits, error feedback's residual in device
// memory, route/memory_router.hpp), and hands the transport the addresses
// it moves. The compressed allreduce's schemes
// (compressed_allreduce_ring.hpp, compressed_allreduce_once.hpp) are the same code over either,
// so ranks on different paths send the same bytes and meet in one call;
// collective/machinery/local_compute.hpp is the same idea for the plain collectives.
//
// Every span a step returns or writes is in the policy's memory: the host
// reads none of routed_codec_compute'. settle() returns once every step so
// far is done, so the transport may read what they wrote and reuse a
// buffer they read.
#pragma once

#include <chorus/codec/error_feedback.hpp>
#include <chorus/codec/spec.hpp>
#include <chorus/collective/machinery/local_compute.hpp>
#include <chorus/compressed/scaling.hpp>
#include <chorus/record/trace.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

namespace chorus::compressed {

template <class Coder>
class host_codec_compute {
  using access = codec::codec_of<std::remove_cvref_t<Coder>>;

 public:
  using codec_type = typename access::type;

  explicit host_codec_compute(Coder& coder) noexcept : coder_(coder) {}

  const codec_type& codec() const noexcept { return access::get(coder_); }
  template <class X>
  X& network(X& ex) const noexcept {
    return ex;
  }

  std::span<std::byte> bytes(scratch_for use, std::size_t count) const { return workspace::local().bytes(use, count); }
  std::span<float> floats(scratch_for use, std::size_t count) const { return workspace::local().floats(use, count); }

  void scale(std::span<const float> in, std::span<float> out, float factor) const { scale_into(in, out, factor); }
  void unscale(std::span<float> values, float prescale) const { compressed::unscale(values, prescale); }
  void divide(std::span<float> values, float divisor) const {
    for (float& value : values) value /= divisor;
  }
  void zero(std::span<float> values) const { std::fill(values.begin(), values.end(), 0.0f); }
  // Elements [offset, +in.size()) of a `total`-element tensor; `slot`: error feedback's residual.
  void encode(std::span<const float> in, std::span<std::byte> out, std::size_t slot, std::size_t offset,
              std::size_t total) const {
    const record::phase phase("encode");
    access::encode(coder_, in, out, slot, offset, total);
  }
  void decode(std::span<const std::byte> in, std::span<float> out) const {
    const record::phase phase("decode");
    codec().decode(in, out);
  }
  void decode_add(std::span<const std::byte> in, std::span<float> sum) const {
    const record::phase phase("decode");
    codec().decode_add(in, sum);
  }
  void settle() const noexcept {}

 private:
  Coder& coder_;
};

// A codec with device kernels (codec/spec.hpp: describable), or error
// feedback around one, whose residual then lives in device memory (made
// through the router's local arithmetic on the first call).
template <class Coder>
class routed_codec_compute {
  using access = codec::codec_of<std::remove_cvref_t<Coder>>;
  static constexpr bool feedback = !std::is_same_v<std::remove_cvref_t<Coder>, typename access::type>;

 public:
  using codec_type = typename access::type;

  routed_codec_compute(Coder& coder, local_arithmetic& where)
      : coder_(coder), spec_(codec::spec_of(access::get(coder))), where_(where) {}

  const codec_type& codec() const noexcept { return access::get(coder_); }
  template <class X>
  collective::network_exchange<X> network(X& ex) const noexcept {
    return {ex, where_};
  }

  std::span<std::byte> bytes(scratch_for use, std::size_t count) const {
    return {static_cast<std::byte*>(where_.scratch(count, slot(use))), count};
  }
  std::span<float> floats(scratch_for use, std::size_t count) const {
    return {static_cast<float*>(where_.scratch(count * sizeof(float), slot(use))), count};
  }

  void scale(std::span<const float> in, std::span<float> out, float factor) const {
    if (!in.empty()) where_.multiply(in.data(), out.data(), in.size(), factor);
  }
  void unscale(std::span<float> values, float prescale) const {
    if (prescale == 1.0f || values.empty()) return;
    if (unscales_by_multiplying(prescale))
      where_.multiply(values.data(), values.data(), values.size(), 1.0f / prescale);
    else
      where_.divide(values.data(), values.size(), prescale);
  }
  void divide(std::span<float> values, float divisor) const {
    if (!values.empty()) where_.divide(values.data(), values.size(), divisor);
  }
  void zero(std::span<float> values) const {
    if (!values.empty()) where_.zero(values.data(), values.size());
  }
  void encode(std::span<const float> in, std::span<std::byte> out, std::size_t slot, std::size_t offset,
              std::size_t total) const {
    if (in.empty()) return;
    const record::phase phase("encode");
    if constexpr (feedback) {
      float* residual = coder_.residual_elsewhere(slot, total, [&](std::size_t bytes) { return where_.kept(bytes); });
      // Sized for the whole tensor, so the pieces of one call share one allocation.
      float* work = floats(scratch_for::feedback, total).data();
      where_.feedback_encode(spec_, in.data(), residual + offset, work, out.data(), in.size());
    } else {
      where_.encode(spec_, in.data(), out.data(), in.size());
    }
  }
  void decode(std::span<const std::byte> in, std::span<float> out) const {
    const record::phase phase("decode");
    if (!out.empty()) where_.decode(spec_, in.data(), out.data(), out.size(), false);
  }
  void decode_add(std::span<const std::byte> in, std::span<float> sum) const {
    const record::phase phase("decode");
    if (!sum.empty()) where_.decode(spec_, in.data(), sum.data(), sum.size(), true);
  }
  void settle() const { where_.settle(); }

 private:
  static std::size_t slot(scratch_for use) noexcept { return static_cast<std::size_t>(use); }

  Coder& coder_;
  codec_spec spec_;
  local_arithmetic& where_;
};

// Runs body(steps) on the direct path, with routed_codec_compute over
// `coder`, where the router takes `views` with its codec; false, said in the
// debug report, where the call is to be staged (a codec without device
// kernels is, under any setting).
template <class Communicator, class Coder, class Body>
bool run_codec_direct(memory_router& router, Communicator& comm, std::string_view collective,
                      std::initializer_list<routed_buffer> views, Coder& coder, Body&& body) {
  using access = codec::codec_of<std::remove_cvref_t<Coder>>;
  using plain = typename access::type;
  if constexpr (codec::describable<plain>) {
    return run_direct(router, comm, collective, views, codec::spec_of(access::get(coder)),
                      [&](local_arithmetic& where) { body(routed_codec_compute<Coder>(coder, where)); });
  } else {
    std::size_t bytes = 0;
    for (const routed_buffer& view : views) bytes += view.bytes;
    report_path(comm, collective, bytes, staged_because(std::string(plain::name) + ", which has no device kernels"));
    return false;
  }
}

}  // namespace chorus::compressed
