// Device arrays in the binding (DLPack kDLCUDA and kDLCUDAManaged): the
// process's GPU, and the router that takes them through every collective.
//
// One GPU per process, as with torch's NCCL backend: the device chorus was
// told (chorus.cuda.use_device), else that of the first device array it is
// given; an array on another device is InvalidArgument. On first use the
// binding installs a chorus::cuda::router for every front door
// (cuda/router.hpp): a call stages its device arrays through pinned memory,
// or hands them to the transport as they are (CHORUS_CUDA_PATH), ordered on
// the stream the Python side set for the calling thread (torch's current
// stream, or `stream=`), with the GIL released as for host arrays.
//
// The device is the CUDA runtime's where the extension was built with the
// CUDA toolkit (CHORUS_PYTHON_CUDA) and a GPU is there, or the fake device
// a test installs from chorus._testing (device_handoff.hpp).
#include "binding.hpp"
#include "device_handoff.hpp"

#ifndef CHORUS_PYTHON_CUDA
#define CHORUS_PYTHON_CUDA 0  // python/CMakeLists.txt sets 1 where it links the CUDA runtime
#endif
#ifndef CHORUS_PYTHON_KERNELS
#define CHORUS_PYTHON_KERNELS 0  // and 1 where nvcc compiled src/device_kernels.cu
#endif

#include <chorus/cuda/router.hpp>
#if CHORUS_PYTHON_CUDA
#include <chorus/cuda/runtime.hpp>
#endif

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <utility>

namespace chorus::python {

#if CHORUS_PYTHON_KERNELS
// src/device_kernels.cu: cuda/kernels.cuh on the process's GPU.
std::unique_ptr<cuda::device_compute> device_kernels(int index);
#endif

namespace {

#if CHORUS_PYTHON_CUDA
// The CUDA runtime on one device whichever thread calls: each call makes
// the device current first (a background worker's thread starts on device 0).
class runtime_on_device final : public cuda::device_operations {
 public:
  explicit runtime_on_device(int index) : index_(index) {}
  std::string name() const override { return "CUDA runtime, device " + std::to_string(index_); }
  memory_kind kind_of(const void* pointer) const noexcept override { return cuda::memory_kind_of(pointer); }
  void* allocate_pinned(std::size_t bytes) override { return current().allocate_pinned(bytes); }
  void free_pinned(void* pointer) noexcept override { quietly_current().free_pinned(pointer); }
  cuda::stream_handle create_stream() override { return current().create_stream(); }
  void destroy_stream(cuda::stream_handle stream) noexcept override { quietly_current().destroy_stream(stream); }
  cuda::event_handle create_event() override { return current().create_event(); }
  void destroy_event(cuda::event_handle event) noexcept override { quietly_current().destroy_event(event); }
  void copy_async(void* to, const void* from, std::size_t bytes, cuda::stream_handle stream) override {
    current().copy_async(to, from, bytes, stream);
  }
  void record(cuda::event_handle event, cuda::stream_handle stream) override { current().record(event, stream); }
  void stream_wait(cuda::stream_handle stream, cuda::event_handle event) override {
    current().stream_wait(stream, event);
  }
  bool completed(cuda::event_handle event) override { return current().completed(event); }
  void* allocate_device(std::size_t bytes) override { return current().allocate_device(bytes); }
  void free_device(void* pointer) noexcept override { quietly_current().free_device(pointer); }

 private:
  cuda::runtime_operations& current() {
    cuda::detail::check(cudaSetDevice(index_), "cudaSetDevice");
    return runtime_;
  }
  cuda::runtime_operations& quietly_current() noexcept {
    (void)cudaSetDevice(index_);
    return runtime_;
  }
  int index_;
  cuda::runtime_operations runtime_;
};
#endif

struct device_state {
  std::mutex mutex;
  device_handoff installed;  // a test's fake device, if any
  std::unique_ptr<cuda::device_operations> runtime;
  std::unique_ptr<cuda::device_compute> kernels;
  std::optional<int> index;  // the DLPack device id arrays must carry
  std::unique_ptr<cuda::device> device;
  std::unique_ptr<cuda::router> router;
  std::unique_ptr<cuda::route_front_doors> routing;
};

// Never destroyed: a collective may still route while the interpreter ends.
device_state& state() {
  static auto* kept = new device_state;
  return *kept;
}

error device_error(errc category, const std::string& text, std::string_view operation) {
  return error(category, text, {-1, -1, std::string(operation)});
}

cuda::device_operations& operations_for(device_state& s, int index, std::string_view operation) {
  if (s.installed.operations != nullptr) return *s.installed.operations;
#if CHORUS_PYTHON_CUDA
  if (!cuda::available())
    throw device_error(errc::unavailable,
                       "a CUDA array, and no CUDA device: cudaGetDeviceCount reports none or fails (no GPU or no "
                       "driver)",
                       operation);
  s.runtime = std::make_unique<runtime_on_device>(index);
  return *s.runtime;
#else
  (void)index;
  throw device_error(errc::unavailable,
                     "a CUDA array, and this chorus extension was built without the CUDA toolkit: reinstall it "
                     "where nvcc or CUDA_HOME is found (pip install ./python), or pass tensor.cpu()",
                     operation);
#endif
}

// The reductions and codecs on the device: the test device's own, else
// chorus's kernels where nvcc built them.
cuda::device_compute* compute_for(device_state& s, int index) {
  if (s.installed.operations != nullptr) return s.installed.compute;
#if CHORUS_PYTHON_KERNELS
  s.kernels = device_kernels(index);
#else
  (void)index;
#endif
  return s.kernels.get();
}

// The router, made on first use (with the GIL held: calls are serialised).
cuda::router& router_for(device_state& s, int index, std::string_view operation) {
  if (s.router) return *s.router;
  cuda::device_operations& ops = operations_for(s, index, operation);
  s.index = index;
  s.device = std::make_unique<cuda::device>(ops);
  s.router = std::make_unique<cuda::router>(*s.device, cuda::staging_options{}, compute_for(s, index));
  s.routing = std::make_unique<cuda::route_front_doors>(*s.router);
  return *s.router;
}

std::string device_name(int index) { return "cuda:" + std::to_string(index); }

}  // namespace

void take_device_array(const void* data, std::size_t bytes, int index, std::string_view role,
                       std::string_view operation) {
  device_state& s = state();
  const std::lock_guard lock(s.mutex);
  if (s.index && *s.index != index)
    throw device_error(errc::invalid_argument,
                       std::string(role) + " is on " + device_name(index) + ", and chorus in this process uses " +
                           device_name(*s.index) + " (one GPU per process: torch.cuda.set_device(local_rank) " +
                           "before making tensors, or chorus.cuda.use_device)",
                       operation);
  cuda::router& router = router_for(s, index, operation);
  if (bytes > 0 && router.kind_of(data) != memory_kind::cuda_device)
    throw device_error(errc::invalid_argument,
                       std::string(role) + " says it is CUDA memory (DLPack), and " + s.device->operations().name() +
                           " does not know its address",
                       operation);
}

const device_handoff* installed_test_device() {
  device_state& s = state();
  const std::lock_guard lock(s.mutex);
  return s.installed.operations != nullptr ? &s.installed : nullptr;
}

std::optional<int> process_device() {
  device_state& s = state();
  const std::lock_guard lock(s.mutex);
  return s.index;
}

void use_process_device(int index, std::string_view operation) {
  device_state& s = state();
  const std::lock_guard lock(s.mutex);
  if (index < 0) throw device_error(errc::invalid_argument, "a device index is 0 or more", operation);
  if (s.index && *s.index != index)
    throw device_error(errc::invalid_argument,
                       "chorus in this process already uses " + device_name(*s.index) + ", not " + device_name(index) +
                           " (one GPU per process)",
                       operation);
  s.index = index;
}

void bind_devices(nb::module_& m) {
  m.def(
      "_set_stream",
      [](std::uintptr_t stream) {
        return reinterpret_cast<std::uintptr_t>(
            std::exchange(chorus::detail::thread_stream(), reinterpret_cast<void*>(stream)));
      },
      nb::arg("stream"),
      "Orders this thread's chorus calls on a device stream (a cudaStream_t as an integer; 0: the legacy "
      "default stream); returns the one set before.");
  m.def("_use_device", [](int index) { use_process_device(index, "use_device"); }, nb::arg("index"));
  m.def("_device", [] {
    device_state& s = state();
    const std::lock_guard lock(s.mutex);
    nb::dict seen;
    seen["built_with_cuda"] = CHORUS_PYTHON_CUDA != 0;
    seen["built_with_kernels"] = CHORUS_PYTHON_KERNELS != 0;
    seen["index"] = s.index ? nb::cast(*s.index) : nb::none();
    seen["device"] = s.device ? nb::cast(s.device->operations().name()) : nb::none();
    seen["test_device"] = s.installed.operations != nullptr;
    return seen;
  });
  m.def(
      "_install_test_device",
      [](nb::capsule given) {
        if (std::string_view(given.name()) != device_handoff::capsule_name)
          throw device_error(errc::invalid_argument, "not a chorus._testing device", "install_test_device");
        device_state& s = state();
        const std::lock_guard lock(s.mutex);
        if (s.router)
          throw device_error(errc::invalid_argument, "a device is in use already: install the test device first",
                             "install_test_device");
        s.installed = *static_cast<const device_handoff*>(given.data());
      },
      nb::arg("handoff"));
}

}  // namespace chorus::python
