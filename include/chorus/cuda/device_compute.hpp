// The arithmetic the direct path runs on the device (reductions, and the
// compressed collectives' scaling and codecs), as an interface that
// g++ code can hold: chorus::cuda::kernels::compute (cuda/kernels.cuh,
// compiled by the user's nvcc) implements it with the device kernels, the
// tests with work on the fake device's streams. A trainer compiled with g++
// alone has none, and its device buffers are staged.
//
//   static chorus::cuda::kernels::compute kernels;              // in a .cu file
//   chorus::cuda::router gpu(chorus::cuda::runtime(), {}, &kernels);
#pragma once

#include <chorus/codec/spec.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/cuda/device.hpp>

#include <cstddef>
#include <string_view>
#include <type_traits>

namespace chorus::cuda {

// Calls visit(static_cast<T*>(nullptr), Op{}) for the element type `type`
// and the built-in op named `op`, where T is its own accumulator (half and
// bfloat16 reduce in float, which the direct path does not do); false when
// there is no such pair. What an implementation of device_compute takes.
template <class Visit>
bool visit_reduction(dtype type, std::string_view op, Visit&& visit) {
  bool taken = false;
  visit_element_type(type, [&]<class T>(T) {
    if constexpr (std::is_same_v<accumulator_t<T>, T>)
      taken = op::visit_builtin(op, [&](auto o) { visit(static_cast<T*>(nullptr), o); });
  });
  return taken;
}

class device_compute {
 public:
  virtual ~device_compute() = default;
  // Whether reduce_into and finalize take this element type and op (the
  // ops as op::name_of names them: sum, prod, min, max, avg). By default:
  // what visit_reduction visits.
  virtual bool reduces(dtype type, std::string_view op) const {
    return visit_reduction(type, op, [](auto*, auto) {});
  }
  // Enqueued on `stream`: accumulate[i] = incoming_is_lower ? op(incoming[i], accumulate[i])
  //                                                         : op(accumulate[i], incoming[i])
  virtual void reduce_into(void* accumulate, const void* incoming, std::size_t n, dtype type, std::string_view op,
                           bool incoming_is_lower, stream_handle stream) = 0;
  // Enqueued on `stream`: the op's final step (avg's division); nothing for the others.
  virtual void finalize(void* values, std::size_t n, dtype type, std::string_view op, std::size_t contributions,
                        stream_handle stream) = 0;

  // The compressed collectives' steps (route/memory_router.hpp: local_arithmetic), enqueued on `stream`.
  // Whether encode and decode take this codec; by default what codec::visit_spec names.
  virtual bool encodes(const codec_spec& codec) const {
    return codec::visit_spec(codec, [](const auto&) {});
  }
  virtual void multiply(const float* in, float* out, std::size_t n, float factor, stream_handle stream) = 0;
  virtual void divide(float* values, std::size_t n, float divisor, stream_handle stream) = 0;
  virtual void zero(float* values, std::size_t n, stream_handle stream) = 0;
  // The window's weighted sums in double (route/local_arithmetic.hpp: weigh, narrow).
  virtual void weigh(double* sum, const float* in, std::size_t n, double weight, bool first, stream_handle stream) = 0;
  virtual void narrow(const double* sum, float* out, std::size_t n, stream_handle stream) = 0;
  virtual void encode(const codec_spec& codec, const float* in, void* out, std::size_t n, stream_handle stream) = 0;
  virtual void decode(const codec_spec& codec, const void* in, float* out, std::size_t n, bool accumulate,
                      stream_handle stream) = 0;
  virtual void feedback_encode(const codec_spec& codec, const float* in, float* residual, float* work, void* out,
                               std::size_t n, stream_handle stream) = 0;
};

}  // namespace chorus::cuda
