// chorus's device kernels (cuda/kernels.cuh) for the binding's router,
// compiled by nvcc where the extension is built with it
// (python/CMakeLists.txt defines CHORUS_PYTHON_KERNELS then). They are what
// device arrays need wherever the transport moves device memory itself
// (NCCL, UCX with CUDA): the reductions, and the codecs of the compressed
// collectives and the DDP hooks. An extension built without nvcc has none;
// its device arrays stage through the host where they can, and a codec on
// NCCL is Unavailable, with that reason.
#include <chorus/cuda/kernels.cuh>

#include <memory>

namespace chorus::python {

namespace {

// The kernels launched on the process's GPU whichever thread calls: a
// background worker's thread starts on device 0.
class kernels_on_device final : public cuda::device_compute {
 public:
  explicit kernels_on_device(int index) : index_(index) {}

  bool reduces(dtype type, std::string_view op) const override { return kernels_.reduces(type, op); }
  bool encodes(const codec_spec& codec) const override { return kernels_.encodes(codec); }
  void reduce_into(void* accumulate, const void* incoming, std::size_t n, dtype type, std::string_view op,
                   bool incoming_is_lower, cuda::stream_handle stream) override {
    current().reduce_into(accumulate, incoming, n, type, op, incoming_is_lower, stream);
  }
  void finalize(void* values, std::size_t n, dtype type, std::string_view op, std::size_t contributions,
                cuda::stream_handle stream) override {
    current().finalize(values, n, type, op, contributions, stream);
  }
  void multiply(const float* in, float* out, std::size_t n, float factor, cuda::stream_handle stream) override {
    current().multiply(in, out, n, factor, stream);
  }
  void divide(float* values, std::size_t n, float divisor, cuda::stream_handle stream) override {
    current().divide(values, n, divisor, stream);
  }
  void zero(float* values, std::size_t n, cuda::stream_handle stream) override { current().zero(values, n, stream); }
  void weigh(double* sum, const float* in, std::size_t n, double weight, bool first,
             cuda::stream_handle stream) override {
    current().weigh(sum, in, n, weight, first, stream);
  }
  void narrow(const double* sum, float* out, std::size_t n, cuda::stream_handle stream) override {
    current().narrow(sum, out, n, stream);
  }
  void encode(const codec_spec& codec, const float* in, void* out, std::size_t n, cuda::stream_handle stream) override {
    current().encode(codec, in, out, n, stream);
  }
  void decode(const codec_spec& codec, const void* in, float* out, std::size_t n, bool accumulate,
              cuda::stream_handle stream) override {
    current().decode(codec, in, out, n, accumulate, stream);
  }
  void feedback_encode(const codec_spec& codec, const float* in, float* residual, float* work, void* out, std::size_t n,
                       cuda::stream_handle stream) override {
    current().feedback_encode(codec, in, residual, work, out, n, stream);
  }

 private:
  cuda::kernels::compute& current() {
    cuda::detail::check(cudaSetDevice(index_), "cudaSetDevice");
    return kernels_;
  }
  int index_;
  cuda::kernels::compute kernels_;
};

}  // namespace

std::unique_ptr<cuda::device_compute> device_kernels(int index) { return std::make_unique<kernels_on_device>(index); }

}  // namespace chorus::python
