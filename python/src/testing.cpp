// chorus._testing: the fake GPU of chorus's C++ tests (tests/fake_device.hpp),
// for the Python tests. Its device memory is mapped so that any host read or
// write through the pointer crashes the process, and it is exported as DLPack
// kDLCUDA arrays: an array that reaches code which touches it on the host
// (rather than through chorus's router) fails the test at once. Streams run
// on worker threads and events complete in stream order, as on a GPU.
//
//   fake = chorus._testing.fake_device()       # installed for chorus in this process
//   x = fake.upload(numpy_array)               # device memory
//   comm.allreduce(x)                          # staged through pinned memory
//   fake.download(x)                           # a NumPy copy, after the stream's work
//
// Built with the package, for tests only; not part of chorus's API.
#include "device_handoff.hpp"

#include "fake_compute.hpp"
#include "fake_device.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace nb = nanobind;

namespace {

using chorus_test::fake_compute;
using chorus_test::fake_device;

// One fake device and its kernels for the process, never destroyed: chorus
// holds them until it ends.
struct fake_gpu {
  fake_device device;
  fake_compute compute{device};
  chorus::python::device_handoff handoff = handed_off();

  // As tests/fake_nccl.hpp: the host adapter moves device memory through its
  // host alias, after the work already on the stream.
  chorus::python::device_handoff handed_off() {
    chorus::python::device_handoff made{&device, &compute, {}, {}, {}};
    made.nccl_moves = [this](const void* p) { return device.kind_of(p) == chorus::memory_kind::cuda_device; };
    made.nccl_address = [this](const void* p) {
      return static_cast<void*>(device.alias_of(const_cast<std::byte*>(static_cast<const std::byte*>(p))));
    };
    made.nccl_after_stream = [this](void* stream) { device.synchronize(stream); };
    return made;
  }
};

fake_gpu& the_fake() {
  static auto* made = new fake_gpu;
  return *made;
}

std::size_t bytes_of(const nb::ndarray<>& a) { return a.size() * a.itemsize(); }

std::vector<std::size_t> shape_of(const nb::ndarray<>& a) {
  std::vector<std::size_t> shape(a.ndim());
  for (std::size_t d = 0; d < a.ndim(); ++d) shape[d] = a.shape(d);
  return shape;
}

void require_contiguous(const nb::ndarray<>& a, const char* what) {
  if (a.size() == 0) return;  // an empty array may have any strides
  std::int64_t expected = 1;
  for (std::size_t d = a.ndim(); d-- > 0;) {
    if (a.shape(d) != 1 && a.stride(d) != expected) throw nb::value_error(what);
    expected *= static_cast<std::int64_t>(a.shape(d));
  }
}

// A device array of `shape` and `type` over fresh fake device memory, freed
// when the array goes.
// array_api: an nb_ndarray object with __dlpack__ and __dlpack_device__,
// as a torch or CuPy array offers them.
using device_ndarray = nb::ndarray<nb::array_api>;

device_ndarray device_array(const std::vector<std::size_t>& shape, nb::dlpack::dtype type, int device_id, void** data) {
  std::size_t count = 1;
  for (std::size_t extent : shape) count *= extent;
  fake_device& fake = the_fake().device;
  void* memory = fake.allocate_device(count * (type.bits / 8));
  nb::capsule owner(memory, [](void* p) noexcept { the_fake().device.free_device(p); });
  *data = memory;
  return device_ndarray(memory, shape.size(), shape.data(), owner, nullptr, type, nb::device::cuda::value, device_id);
}

void* device_pointer(const nb::ndarray<>& a) {
  if (a.device_type() != nb::device::cuda::value) throw nb::value_error("not a fake device array");
  return const_cast<void*>(a.data());
}

}  // namespace

NB_MODULE(_testing, m) {
  m.doc() = "The fake GPU of chorus's tests (device memory the host cannot touch), as DLPack CUDA arrays.";

  nb::class_<fake_gpu>(m, "FakeDevice")
      .def(
          "upload",
          [](fake_gpu& self, nb::ndarray<nb::ro, nb::device::cpu> host, int device_id) {
            require_contiguous(nb::ndarray<>(host), "upload takes a C-contiguous host array");
            void* data = nullptr;
            device_ndarray made = device_array(shape_of(nb::ndarray<>(host)), host.dtype(), device_id, &data);
            if (host.size() > 0)
              std::memcpy(self.device.alias_of(static_cast<std::byte*>(data)), host.data(),
                          bytes_of(nb::ndarray<>(host)));
            return made;
          },
          nb::arg("host"), nb::arg("device_id") = 0, "A device copy of a host array (on `device_id` as DLPack says).")
      .def(
          "download",
          [](fake_gpu& self, nb::ndarray<> array, std::uintptr_t stream) {
            require_contiguous(array, "download takes a C-contiguous device array");
            self.device.synchronize(reinterpret_cast<void*>(stream));
            const std::size_t bytes = bytes_of(array);
            auto* copy = new std::vector<std::byte>(bytes);
            if (bytes > 0)
              std::memcpy(copy->data(), self.device.alias_of(static_cast<std::byte*>(device_pointer(array))), bytes);
            nb::capsule owner(copy, [](void* p) noexcept { delete static_cast<std::vector<std::byte>*>(p); });
            const std::vector<std::size_t> shape = shape_of(array);
            return nb::ndarray<nb::numpy>(copy->data(), shape.size(), shape.data(), owner, nullptr, array.dtype());
          },
          nb::arg("array"), nb::arg("stream") = 0,
          "A NumPy copy of a device array, once the work on `stream` so far has run.")
      .def(
          "write",
          [](fake_gpu& self, nb::ndarray<> array, nb::ndarray<nb::ro, nb::device::cpu> values) {
            require_contiguous(array, "write takes a C-contiguous device array");
            const std::size_t bytes = bytes_of(array);
            if (bytes_of(nb::ndarray<>(values)) != bytes) throw nb::value_error("values and array differ in size");
            self.device.synchronize(nullptr);  // after the default stream's work, as cudaMemcpy
            if (bytes > 0)
              std::memcpy(self.device.alias_of(static_cast<std::byte*>(device_pointer(array))), values.data(), bytes);
          },
          nb::arg("array"), nb::arg("values"), "Writes `values` into a device array now, as cudaMemcpy would.")
      .def(
          "write_later",
          [](fake_gpu& self, nb::ndarray<> array, nb::ndarray<nb::ro, nb::device::cpu> values, std::uintptr_t stream,
             double delay_s) {
            const std::size_t bytes = bytes_of(array);
            if (bytes_of(nb::ndarray<>(values)) != bytes) throw nb::value_error("values and array differ in size");
            auto held = std::make_shared<std::vector<std::byte>>(bytes);
            if (bytes > 0) std::memcpy(held->data(), values.data(), bytes);
            std::byte* to = self.device.alias_of(static_cast<std::byte*>(device_pointer(array)));
            self.device.launch(reinterpret_cast<void*>(stream), [held, to, delay_s] {
              std::this_thread::sleep_for(std::chrono::duration<double>(delay_s));
              if (!held->empty()) std::memcpy(to, held->data(), held->size());
            });
          },
          nb::arg("array"), nb::arg("values"), nb::arg("stream"), nb::arg("delay_s") = 0.2,
          "A 'kernel' on `stream` that writes `values` into the array after `delay_s` seconds: work the next "
          "call on that stream must come after.")
      .def(
          "stream", [](fake_gpu& self) { return reinterpret_cast<std::uintptr_t>(self.device.create_stream()); },
          "A new stream (a cudaStream_t's stand-in, as an integer).")
      .def(
          "synchronize",
          [](fake_gpu& self, std::uintptr_t stream) {
            nb::gil_scoped_release released;
            self.device.synchronize(reinterpret_cast<void*>(stream));
          },
          nb::arg("stream") = 0)
      .def_prop_rw(
          "network_reaches_device", [](fake_gpu& self) { return self.device.network_reaches_device({}); },
          [](fake_gpu& self, bool reaches) { self.device.set_network_reaches(reaches); },
          "Whether the fake stands in for a UCX that moves CUDA memory (the direct path; default False: staged).")
      .def_prop_ro(
          "copies", [](fake_gpu& self) { return self.device.copies(); },
          "Copies enqueued so far, either way (the staged path's).")
      .def_prop_ro("copied_bytes", [](fake_gpu& self) { return self.device.copied_bytes(); })
      .def_prop_ro(
          "kernel_launches", [](fake_gpu& self) { return self.compute.launches.load(); },
          "The direct path's reductions launched so far.");

  m.def(
      "fake_device",
      [](bool install) {
        fake_gpu& fake = the_fake();
        static bool installed = false;
        if (install && !installed) {
          fake.device.set_network_reaches(false);
          nb::module_::import_("chorus._chorus")
              .attr("_install_test_device")(nb::capsule(&fake.handoff, chorus::python::device_handoff::capsule_name));
          installed = true;
        }
        return &fake;
      },
      nb::arg("install") = true, nb::rv_policy::reference,
      "The process's fake device; installed as chorus's device (before any device array is used) unless "
      "install=False, when chorus sees its arrays as CUDA memory of a GPU it does not have.");
}
