// Error feedback (Seide et al. 2014; Karimireddy et al. 2019): keep what a
// lossy codec lost and add it to the next call, so nothing is lost for good:
// after K steps, the decoded outputs plus the residual sum exactly (to float
// rounding) to the inputs. This is what makes int8 and 1-bit gradients
// converge like float ones.
//
//   chorus::codec::error_feedback grads_feedback{chorus::codec::onebit{}};
//   chorus::allreduce(comm, grads, chorus::op::avg{}, grads_feedback);
//
// One object per tensor: it holds that tensor's residual, sized by the first
// call, in two slots. A compressed allreduce that encodes each contribution
// once uses slot 0 for this rank's contribution and slot 1 for the part of
// the sum it encodes; the ring uses slot 0 for everything it encodes (each
// element exactly once per call: a partial sum or, for its own block, the
// final sum).
//
// A device tensor on the direct path (compressed/codec_compute.hpp) keeps its
// residual in device memory, made on first use through residual_elsewhere;
// residual() then reads nothing, and the object must go before the device
// runtime that made that memory. One object serves one kind of memory.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/codec/elements.hpp>
#include <chorus/core/error.hpp>

#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace chorus::codec {

template <codec Codec>
class error_feedback {
 public:
  static constexpr std::size_t slots = 2;

  explicit error_feedback(Codec inner = {}) : codec_(std::move(inner)) {}

  const Codec& codec() const noexcept { return codec_; }

  // Encodes values + residual and keeps (values + residual) - decoded.
  void encode(std::span<const float> values, std::span<std::byte> out, std::size_t slot = 0) {
    encode_piece(values, out, slot, 0, values.size());
  }

  // The same for a piece of the tensor, elements [offset, offset + size) of
  // `tensor_size` (a ring allreduce encodes segment by segment).
  void encode_piece(std::span<const float> values, std::span<std::byte> out, std::size_t slot, std::size_t offset,
                    std::size_t tensor_size) {
    if (offset > tensor_size || values.size() > tensor_size - offset)
      throw error(errc::invalid_argument, "error_feedback: piece [" + std::to_string(offset) + ", +" +
                                              std::to_string(values.size()) + ") is outside a " +
                                              std::to_string(tensor_size) + "-element tensor");
    const std::span<float> residual = std::span(residual_for(slot, tensor_size)).subspan(offset, values.size());
    work_.resize(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) work_[i] = element::with_residual(values[i], residual[i]);
    codec_.encode(work_, out);
    codec_.decode(out, residual);
    for (std::size_t i = 0; i < values.size(); ++i) residual[i] = element::lost(work_[i], residual[i]);
  }

  std::span<const float> residual(std::size_t slot = 0) const { return residuals_.at(slot); }
  void reset() {
    for (auto& residual : residuals_) residual.clear();
    for (auto& residual : elsewhere_) residual = {};
  }
  // One slot's residual only: slot 1's is laid out by the group's size (the
  // part of the sum this rank encodes), so it goes when the group changes.
  void reset(std::size_t slot) {
    check_slot(slot);
    residuals_[slot].clear();
    elsewhere_[slot] = {};
  }

  // Memory of `bytes` that holds zeros when first used and is freed with its
  // last owner (the direct path: device memory).
  using make_memory = std::function<std::shared_ptr<void>(std::size_t bytes)>;

  // The residual of `slot` for a `tensor_size`-element tensor held in other
  // memory than the host's, made by `make` on first use.
  float* residual_elsewhere(std::size_t slot, std::size_t tensor_size, const make_memory& make) {
    check_slot(slot);
    if (!residuals_[slot].empty())
      throw error(errc::invalid_argument,
                  "error_feedback holds its residual in host memory; this call's tensor is "
                  "elsewhere (device memory): use one error_feedback per tensor");
    kept_residual& residual = elsewhere_[slot];
    if (!residual.memory) residual = {make(tensor_size * sizeof(float)), tensor_size};
    check_size(residual.elements, tensor_size);
    return static_cast<float*>(residual.memory.get());
  }

 private:
  // A residual in other memory: moved with the object; copying it would
  // share it, so a copy is an error.
  struct kept_residual {
    std::shared_ptr<void> memory;
    std::size_t elements = 0;

    kept_residual() = default;
    kept_residual(std::shared_ptr<void> m, std::size_t n) noexcept : memory(std::move(m)), elements(n) {}
    kept_residual(kept_residual&&) noexcept = default;
    kept_residual& operator=(kept_residual&&) noexcept = default;
    kept_residual(const kept_residual& other) { refuse_copy(other); }
    kept_residual& operator=(const kept_residual& other) {
      refuse_copy(other);
      memory.reset();
      elements = 0;
      return *this;
    }
    static void refuse_copy(const kept_residual& other) {
      if (other.memory)
        throw error(errc::invalid_argument, "error_feedback: a residual held in device memory cannot be copied");
    }
  };

  static void check_slot(std::size_t slot) {
    if (slot >= slots)
      throw error(errc::invalid_argument, "error_feedback: slot " + std::to_string(slot) + " is not 0 or 1");
  }
  static void check_size(std::size_t held, std::size_t elements) {
    if (held != elements)
      throw error(errc::invalid_argument, "error_feedback holds the residual of a " + std::to_string(held) +
                                              "-element tensor; this call passes " + std::to_string(elements) +
                                              ": use one error_feedback per tensor");
  }

  std::vector<float>& residual_for(std::size_t slot, std::size_t elements) {
    check_slot(slot);
    if (elsewhere_[slot].memory)
      throw error(errc::invalid_argument,
                  "error_feedback holds its residual in device memory; this call's tensor is "
                  "in host memory: use one error_feedback per tensor");
    std::vector<float>& residual = residuals_[slot];
    if (residual.empty()) residual.assign(elements, 0.0f);
    check_size(residual.size(), elements);
    return residual;
  }

  Codec codec_;
  std::array<std::vector<float>, slots> residuals_;
  std::array<kept_residual, slots> elsewhere_;
  std::vector<float> work_;
};

// What the compressed collectives accept: a codec, or an error_feedback
// wrapping one (passed by reference: it carries state between calls).
template <class C>
struct codec_of {
  using type = C;
  static const C& get(const C& c) { return c; }
  static void encode(const C& c, std::span<const float> in, std::span<std::byte> out, std::size_t, std::size_t = 0,
                     std::size_t = 0) {
    c.encode(in, out);
  }
};
template <class C>
struct codec_of<error_feedback<C>> {
  using type = C;
  static const C& get(const error_feedback<C>& f) { return f.codec(); }
  static void encode(error_feedback<C>& f, std::span<const float> in, std::span<std::byte> out, std::size_t slot) {
    f.encode(in, out, slot);
  }
  static void encode(error_feedback<C>& f, std::span<const float> in, std::span<std::byte> out, std::size_t slot,
                     std::size_t offset, std::size_t tensor_size) {
    f.encode_piece(in, out, slot, offset, tensor_size);
  }
};

template <class C>
concept codec_or_feedback = codec<typename codec_of<std::remove_cvref_t<C>>::type>;

}  // namespace chorus::codec
