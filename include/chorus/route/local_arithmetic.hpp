// local_arithmetic: where the direct path runs an algorithm's local computation
// (reductions, copies, encoding) for buffers the host cannot touch; the
// CUDA layer implements it with kernels on the caller's stream.
#pragma once

#include <chorus/core/element_type.hpp>
#include <chorus/route/codec_spec.hpp>

#include <cstddef>
#include <memory>
#include <string_view>

namespace chorus {

// The direct path: the buffer goes to the transport as it is (a UCX that
// moves CUDA memory), and an algorithm's local computation runs where the memory
// lives (cuda/router.hpp: kernels on the caller's stream). Ops are named as
// op::name_of names them (sum, prod, min, max, avg).
class local_arithmetic {
 public:
  static constexpr std::size_t scratch_slots = 6;
  // Scratch of at least `bytes` in the buffer's kind of memory, held for the
  // call, one per slot below scratch_slots: 0 for the algorithm's window, 1
  // for a work copy (as scratch.hpp); a compressed collective uses them all.
  virtual void* scratch(std::size_t bytes, std::size_t slot) = 0;
  // Copies `bytes` between two buffers of this memory, in order with the steps.
  virtual void copy(void* to, const void* from, std::size_t bytes) = 0;
  // accumulate[i] = incoming_is_lower ? op(incoming[i], accumulate[i]) : op(accumulate[i], incoming[i])
  virtual void reduce_into(void* accumulate, const void* incoming, std::size_t n, dtype type, std::string_view op,
                           bool incoming_is_lower) = 0;
  // The op's final step (avg divides by the contributions); nothing for the others.
  virtual void finalize(void* values, std::size_t n, dtype type, std::string_view op, std::size_t contributions) = 0;
  // The compressed collectives' steps over float: out[i] = in[i] * factor;
  // values[i] /= divisor; values[i] = +0.
  virtual void multiply(const float* in, float* out, std::size_t n, float factor) = 0;
  virtual void divide(float* values, std::size_t n, float divisor) = 0;
  virtual void zero(float* values, std::size_t n) = 0;
  // A weighted sum kept in double, as the window's host combine keeps it
  // (window/window.hpp): sum[i] = (first ? 0 : sum[i]) + weight * in[i];
  // then out[i] = float(sum[i]), rounded once.
  virtual void weigh(double* sum, const float* in, std::size_t n, double weight, bool first) = 0;
  virtual void narrow(const double* sum, float* out, std::size_t n) = 0;
  // The codec's encode, and its decode (accumulate: decode_add), with the
  // CPU codec's bits (codec/elements.hpp).
  virtual void encode(const codec_spec& codec, const float* in, void* out, std::size_t n) = 0;
  virtual void decode(const codec_spec& codec, const void* in, float* out, std::size_t n, bool accumulate) = 0;
  // One error-feedback step (codec/error_feedback.hpp): encodes in + residual
  // into `out` and keeps what decoding lost in `residual`; `work`: n floats.
  virtual void feedback_encode(const codec_spec& codec, const float* in, float* residual, float* work, void* out,
                               std::size_t n) = 0;
  // Memory of `bytes` in the buffer's kind that outlives the call (error
  // feedback's residual), zeroed in order with the steps; freed with its
  // last owner.
  virtual std::shared_ptr<void> kept(std::size_t bytes) = 0;
  // Returns once every step above is done, so the transport may read what they wrote.
  virtual void settle() = 0;
  // The address the transport moves for `data`.
  virtual void* network_address(void* data) const = 0;

 protected:
  ~local_arithmetic() = default;
};

}  // namespace chorus
