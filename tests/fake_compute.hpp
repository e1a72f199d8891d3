// The device kernels' stand-in for tests on the fake device
// (fake_device.hpp): each "kernel" is the host code it mirrors, run on the
// fake stream over the memory's host alias, as a kernel runs on a GPU.
#pragma once

#include "fake_device.hpp"

#include <chorus/codec/elements.hpp>
#include <chorus/codec/spec.hpp>
#include <chorus/collective/machinery/reduce_local.hpp>
#include <chorus/compressed/scaling.hpp>
#include <chorus/cuda/device_compute.hpp>

#include <algorithm>
#include <atomic>
#include <span>
#include <string>

namespace chorus_test {

class fake_compute final : public chorus::cuda::device_compute {
 public:
  explicit fake_compute(fake_device& f) : fake_(f) {}

  void reduce_into(void* accumulate, const void* incoming, std::size_t n, chorus::dtype type, std::string_view op,
                   bool incoming_is_lower, chorus::cuda::stream_handle stream) override {
    ++launches;
    std::byte* acc = fake_.alias_of(static_cast<std::byte*>(accumulate));
    const std::byte* in = fake_.alias_of(static_cast<const std::byte*>(incoming));
    fake_.launch(stream, [=] {
      chorus::cuda::visit_reduction(type, op, [&]<class T, class Op>(T*, Op o) {
        chorus::collective::reduce_into(std::span(reinterpret_cast<T*>(acc), n),
                                        std::span(reinterpret_cast<const T*>(in), n), o, incoming_is_lower);
      });
    });
  }
  void finalize(void* values, std::size_t n, chorus::dtype type, std::string_view op, std::size_t contributions,
                chorus::cuda::stream_handle stream) override {
    std::byte* v = fake_.alias_of(static_cast<std::byte*>(values));
    fake_.launch(stream, [=] {
      chorus::cuda::visit_reduction(type, op, [&]<class T, class Op>(T*, Op o) {
        chorus::collective::finalize_all(std::span(reinterpret_cast<T*>(v), n), o, contributions);
      });
    });
  }

  void multiply(const float* in, float* out, std::size_t n, float factor, chorus::cuda::stream_handle stream) override {
    const float* from = floats(in);
    float* to = floats(out);
    fake_.launch(stream, [=] { chorus::compressed::scale_into(std::span(from, n), std::span(to, n), factor); });
  }
  void divide(float* values, std::size_t n, float divisor, chorus::cuda::stream_handle stream) override {
    float* v = floats(values);
    fake_.launch(stream, [=] {
      for (float& value : std::span(v, n)) value /= divisor;
    });
  }
  void zero(float* values, std::size_t n, chorus::cuda::stream_handle stream) override {
    float* v = floats(values);
    fake_.launch(stream, [=] { std::fill_n(v, n, 0.0f); });
  }
  void weigh(double* sum, const float* in, std::size_t n, double weight, bool first,
             chorus::cuda::stream_handle stream) override {
    ++launches;
    double* to = fake_.alias_of(sum);
    const float* from = floats(in);
    fake_.launch(stream, [=] {
      for (std::size_t i = 0; i < n; ++i) {
        const double term = weight * static_cast<double>(from[i]);
        to[i] = first ? term : to[i] + term;
      }
    });
  }
  void narrow(const double* sum, float* out, std::size_t n, chorus::cuda::stream_handle stream) override {
    const double* from = fake_.alias_of(const_cast<double*>(sum));
    float* to = floats(out);
    fake_.launch(stream, [=] {
      for (std::size_t i = 0; i < n; ++i) to[i] = static_cast<float>(from[i]);
    });
  }
  void encode(const chorus::codec_spec& spec, const float* in, void* out, std::size_t n,
              chorus::cuda::stream_handle stream) override {
    ++codec_launches;
    const float* from = floats(in);
    std::byte* to = fake_.alias_of(static_cast<std::byte*>(out));
    const std::string name(spec.name);  // the spec's view outlives no call
    fake_.launch(stream, [=] {
      chorus::codec::visit_spec({name, spec.block, spec.saturate}, [&](const auto& c) {
        c.encode(std::span(from, n), std::span(to, c.encoded_bytes(n)));
      });
    });
  }
  void decode(const chorus::codec_spec& spec, const void* in, float* out, std::size_t n, bool accumulate,
              chorus::cuda::stream_handle stream) override {
    ++codec_launches;
    const std::byte* from = fake_.alias_of(static_cast<const std::byte*>(in));
    float* to = floats(out);
    const std::string name(spec.name);
    fake_.launch(stream, [=] {
      chorus::codec::visit_spec({name, spec.block, spec.saturate}, [&](const auto& c) {
        const std::span<const std::byte> bytes(from, c.encoded_bytes(n));
        if (accumulate)
          c.decode_add(bytes, std::span(to, n));
        else
          c.decode(bytes, std::span(to, n));
      });
    });
  }

  // codec/error_feedback.hpp's step, on the aliases.
  void feedback_encode(const chorus::codec_spec& spec, const float* in, float* residual, float* work, void* out,
                       std::size_t n, chorus::cuda::stream_handle stream) override {
    ++feedback_launches;
    const float* values = floats(in);
    float* kept = floats(residual);
    float* scratch = floats(work);
    std::byte* to = fake_.alias_of(static_cast<std::byte*>(out));
    const std::string name(spec.name);
    fake_.launch(stream, [=] {
      chorus::codec::visit_spec({name, spec.block, spec.saturate}, [&](const auto& c) {
        namespace element = chorus::codec::element;
        for (std::size_t i = 0; i < n; ++i) scratch[i] = element::with_residual(values[i], kept[i]);
        const std::span<std::byte> bytes(to, c.encoded_bytes(n));
        c.encode(std::span<const float>(scratch, n), bytes);
        c.decode(bytes, std::span(kept, n));
        for (std::size_t i = 0; i < n; ++i) kept[i] = element::lost(scratch[i], kept[i]);
      });
    });
  }

  std::atomic<int> launches{0}, codec_launches{0}, feedback_launches{0};

 private:
  float* floats(const float* device) const { return fake_.alias_of(const_cast<float*>(device)); }

  fake_device& fake_;
};

}  // namespace chorus_test
