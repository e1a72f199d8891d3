// chorus.nccl.connect: an NCCL communicator made from a chorus one (C++
// chorus::nccl::connect), with the collectives bound from the same code as
// on chorus.Communicator (reductions.cpp, movements.cpp): device arrays go
// through NCCL on the caller's stream, host arrays through the NCCL
// communicator's own chorus communicator over UCX. Waits are bounded by the
// timeout; an NCCL error or a timeout aborts the NCCL communicator and is
// the chorus error of its category.
//
// The NCCL library comes from chorus._nccl (nccl_library.cpp) in a capsule,
// or, in the tests, it is chorus's host adapter over chorus._testing's fake
// device (nccl/host_adapter.hpp); with neither, connect is Unavailable.
#include "binding.hpp"
#include "device_handoff.hpp"

#include <chorus/nccl/collectives.hpp>
#include <chorus/nccl/nccl_compressed_allreduce.hpp>
#include <chorus/nccl/host_adapter.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <future>
#include <optional>

namespace chorus::python {

nccl::communicator& py_nccl_communicator::get(std::string_view operation) {
  if (!comm.valid())
    throw error(errc::invalid_argument, "the NCCL communicator is closed", {-1, -1, std::string(operation)});
  return comm;
}

py_nccl_communicator::~py_nccl_communicator() {
  without_gil_if_held([this] { close(); });
}

void py_nccl_communicator::close() { comm = {}; }

std::unique_ptr<pending_request> start_collective(py_nccl_communicator& self, const char* operation, nccl_work_on work,
                                                  nb::object keep, nb::object callback) {
  nccl::communicator& comm = self.get(operation);
  std::exception_ptr failure;
  try {
    without_gil([&] { work(comm); });
  } catch (...) {
    failure = std::current_exception();
  }
  (void)keep;  // the call is done: nothing reads the arrays any more
  call_back(std::make_shared<nb::object>(std::move(callback)), failure);  // as from a chorus thread: never raises
  std::promise<void> outcome;
  if (failure)
    outcome.set_exception(failure);
  else
    outcome.set_value();
  return std::make_unique<pending_request>(collective_request(outcome.get_future(), comm.timeout(), operation));
}

namespace {

// The adapter connect() uses: the test device's host adapter, else the
// NCCL library chorus._nccl handed over (`library`: its capsule, or None).
std::shared_ptr<nccl::adapter> adapter_for(nb::handle library, std::string_view operation) {
  if (const device_handoff* fake = installed_test_device(); fake != nullptr && fake->nccl_moves) {
    nccl::host_adapter_options on_fake;
    on_fake.moves = fake->nccl_moves;
    on_fake.address = fake->nccl_address;
    on_fake.after_stream = fake->nccl_after_stream;
    return std::make_shared<nccl::host_adapter>(std::move(on_fake));
  }
  nb::capsule handed;
  if (nb::try_cast(library, handed, false) && std::string_view(handed.name()) == "chorus.nccl_adapter")
    return *static_cast<const std::shared_ptr<nccl::adapter>*>(handed.data());
  throw error(errc::unavailable,
              "no NCCL: this chorus extension was built without it, or its library could not be loaded "
              "(chorus._nccl; reinstall with pip install ./python where CUDA and NCCL are found)",
              {-1, -1, std::string(operation)});
}

// Point-to-point on NCCL: no tags (NCCL matches the messages between two
// ranks in the order they were posted). A device array's send or receive
// is queued until the next post, which starts everything queued as one
// NCCL group (so a ring of sends and receives cannot deadlock); a host
// array's starts at once on the chorus side.
template <bool Sending>
void queue_bytes(py_nccl_communicator& self, nb::handle tensor, int peer, int tag, const char* operation) {
  nccl::communicator& comm = self.get(operation);
  if (tag != 0)
    throw error(errc::invalid_argument, "NCCL has no tags: messages between two ranks match in order (tag=0)",
                {comm.rank(), peer, operation});
  if constexpr (Sending) {
    const buffer data = readable(tensor, "tensor", operation, memory::host_or_device);
    self.queued.push_back(
        comm.isend(std::span<const std::uint8_t>(data.as<std::uint8_t>().data(), data.bytes()), peer));
  } else {
    const buffer data = writable(tensor, "tensor", operation, memory::host_or_device);
    self.queued.push_back(comm.irecv(std::span<std::uint8_t>(data.as<std::uint8_t>().data(), data.bytes()), peer));
  }
  self.queued_arrays.push_back(nb::borrow(tensor));
}

// Posts what is queued as one group and waits for it (bounded): until its
// stream has done it, or, on a communicator made with synchronous=False,
// until it is enqueued.
void post_queued(py_nccl_communicator& self, const char* operation) {
  nccl::communicator& comm = self.get(operation);
  std::vector<nccl::communicator::request> posting;
  posting.swap(self.queued);
  std::vector<nb::object> arrays;  // released once posted, with the GIL
  arrays.swap(self.queued_arrays);
  without_gil([&] { comm.wait_all(posting, operation); });
}

}  // namespace

void bind_nccl(nb::module_& m) {
  nb::class_<py_nccl_communicator> communicator(
      m, "NcclCommunicator",
      "An NCCL communicator made from a chorus one: device arrays through NCCL, host arrays through chorus.");
  communicator.def_prop_ro("rank", [](py_nccl_communicator& self) { return self.get("rank").rank(); })
      .def_prop_ro("size", [](py_nccl_communicator& self) { return self.get("size").size(); })
      .def_prop_ro("device", [](py_nccl_communicator& self) { return self.get("device").device(); })
      .def_prop_ro("timeout",
                   [](py_nccl_communicator& self) {
                     return std::chrono::duration<double>(self.get("timeout").timeout()).count();
                   })
      .def_prop_ro("last_algorithm", [](py_nccl_communicator& self) { return self.last_algorithm; })
      .def_prop_ro("closed", [](py_nccl_communicator& self) { return !self.comm.valid(); })
      .def("close",
           [](py_nccl_communicator& self) {
             nb::gil_scoped_release released;
             self.close();
           })
      .def("barrier",
           [](py_nccl_communicator& self) {
             nccl::communicator& comm = self.get("barrier");
             without_gil([&] { nccl::barrier(comm); });
           })
      .def(
          "split",
          [](py_nccl_communicator& self, int color, int key) {
            nccl::communicator& comm = self.get("split");
            return std::make_unique<py_nccl_communicator>(without_gil([&] { return comm.split(color, key); }));
          },
          nb::arg("color"), nb::arg("key"))
      .def(
          "send",
          [](py_nccl_communicator& self, nb::handle tensor, int peer, int tag) {
            queue_bytes<true>(self, tensor, peer, tag, "send");
            post_queued(self, "send");
          },
          nb::arg("tensor"), nb::arg("peer"), nb::arg("tag") = 0)
      .def(
          "recv",
          [](py_nccl_communicator& self, nb::handle tensor, int peer, int tag) {
            queue_bytes<false>(self, tensor, peer, tag, "recv");
            post_queued(self, "recv");
          },
          nb::arg("tensor"), nb::arg("peer"), nb::arg("tag") = 0)
      .def(
          "queue_send",
          [](py_nccl_communicator& self, nb::handle tensor, int peer) {
            queue_bytes<true>(self, tensor, peer, 0, "isend");
          },
          nb::arg("tensor"), nb::arg("peer"), "Queues a send until the next post (a host array's starts now).")
      .def(
          "queue_recv",
          [](py_nccl_communicator& self, nb::handle tensor, int peer) {
            queue_bytes<false>(self, tensor, peer, 0, "irecv");
          },
          nb::arg("tensor"), nb::arg("peer"), "Queues a receive until the next post (a host array's starts now).")
      .def_prop_ro("queued", [](py_nccl_communicator& self) { return self.queued.size(); })
      .def(
          "post", [](py_nccl_communicator& self) { post_queued(self, "wait"); },
          "Starts the queued sends and receives as one NCCL group and waits for them (bounded).")
      .def(
          "synchronize",
          [](py_nccl_communicator& self, std::uintptr_t stream) {
            nccl::communicator& comm = self.get("synchronize");
            without_gil([&] { comm.wait(reinterpret_cast<cuda::stream_handle>(stream), "synchronize"); });
          },
          nb::arg("stream"),
          "Waits until the stream (a cudaStream_t as an integer) has done its work, at most the timeout; NCCL's "
          "error or the timeout aborts the communicator and raises.")
      .def(
          "abort", [](py_nccl_communicator& self, std::string reason) { self.get("abort").abort(std::move(reason)); },
          nb::arg("reason"), "Stops what the NCCL side has in flight; the communicator is unusable after.");
  bind_reductions(communicator);
  bind_movements(communicator);

  m.def(
      "nccl_connect",
      [](py_communicator& from, std::optional<int> device, nb::handle library, bool synchronous) {
        chorus::communicator& comm = from.get("nccl.connect");
        nccl::options given;
        given.synchronous = synchronous;
        if (device)
          given.device = *device;
        else if (const std::optional<int> chosen = process_device())
          given.device = *chosen;
        std::shared_ptr<nccl::adapter> through = adapter_for(library, "nccl.connect");
        auto made = std::make_unique<py_nccl_communicator>(
            without_gil([&] { return nccl::communicator(comm, std::move(through), given); }));
        use_process_device(made->comm.device(), "nccl.connect");
        return made;
      },
      nb::arg("comm"), nb::arg("device").none() = nb::none(), nb::arg("library").none() = nb::none(),
      nb::arg("synchronous") = true,
      "Collective over `comm`: an NCCL communicator of the same ranks, on `device` (default: the one chorus "
      "uses in this process, else CHORUS_LOCAL_RANK modulo the GPUs). synchronous=False: a call on device "
      "arrays returns once enqueued on its stream (synchronize(stream) waits for it).");
}

}  // namespace chorus::python
