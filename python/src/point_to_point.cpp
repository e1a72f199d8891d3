// Point-to-point on arrays: send and recv, and isend/irecv, which post the
// transfer at once (so sends and receives posted together cannot deadlock)
// and complete it on the communicator's completion thread. A receive takes
// exactly the array's bytes; another size is a chorus.Mismatch.
//
// Device arrays: send and recv stage them (or hand them to a UCX that moves
// CUDA memory). chorus's isend and irecv take only memory the transport
// moves, so where it moves host memory only and there is no direct path,
// the binding stages a non-blocking transfer itself through a host copy: a
// send copies the array out before posting (after the caller's stream), a
// receive lands in the copy and is copied in before the request completes.
#include "binding.hpp"

#include <nanobind/stl/unique_ptr.h>

#include <vector>

namespace chorus::python {

namespace {

using request = chorus::communicator::request;
using host_copy = std::shared_ptr<std::vector<std::byte>>;
constexpr std::size_t any_size = static_cast<std::size_t>(-1);

std::unique_ptr<pending_request> started(py_communicator& self, const char* operation, request posted,
                                         std::size_t expected, nb::handle tensor, nb::object callback,
                                         const buffer& landing = {}, host_copy staged = {},
                                         std::shared_ptr<std::atomic<int>> source = {}) {
  auto handle = std::make_shared<request>(std::move(posted));
  void* const stream = chorus::detail::thread_stream();
  return start_completion(
      self, operation,
      [handle, expected, operation, landing, staged, source, stream](chorus::communicator& c) {
        c.wait(*handle, operation);
        if (expected != any_size) c.expect_bytes(*handle, expected, operation);
        if (source) source->store(c.source_of(*handle));
        if (staged && landing.count > 0) {  // a staged receive: into the device array, on the caller's stream
          const thread_stream_scope ordered(stream);
          copy_elements(c, staged->data(), staged->size(), landing.data);
        }
      },
      nb::borrow(tensor), std::move(callback), source);
}

// Whether a non-blocking transfer of `data` is staged here (see above).
bool staged_here(chorus::communicator& comm, const buffer& data) {
  if (!data.device || data.count == 0) return false;
  memory_router* router = routed(std::span<const std::byte>(data.data, data.bytes()));
  const network_memory network = network_of(comm);
  if (router == nullptr || network.moved.contains(memory_kind::cuda_device)) return false;
  return !router->direct_path({data.data, data.bytes(), buffer_use::read}, dtype::uint8, "", network).direct;
}

host_copy staged_copy(std::size_t bytes) { return std::make_shared<std::vector<std::byte>>(bytes); }

}  // namespace

void bind_point_to_point(nb::class_<py_communicator>& communicator) {
  communicator.def(
      "send",
      [](py_communicator& self, nb::handle tensor, int peer, int tag) {
        chorus::communicator& comm = self.get("send");
        const buffer data = readable(tensor, "tensor", "send", memory::host_or_device);
        without_gil([&] { comm.send(std::span<const std::byte>(data.data, data.bytes()), peer, tag); });
      },
      nb::arg("tensor"), nb::arg("peer"), nb::arg("tag") = 0, "Sends `tensor` to `peer`; returns once sent.");
  communicator.def(
      "recv",
      [](py_communicator& self, nb::handle tensor, int peer, int tag) {
        chorus::communicator& comm = self.get("recv");
        const buffer data = writable(tensor, "tensor", "recv", memory::host_or_device);
        without_gil([&] { comm.recv(std::span<std::byte>(data.data, data.bytes()), peer, tag); });
      },
      nb::arg("tensor"), nb::arg("peer"), nb::arg("tag") = 0,
      "Receives exactly len(tensor) elements from `peer` into `tensor`.");
  communicator.def(
      "isend",
      [](py_communicator& self, nb::handle tensor, int peer, int tag, nb::object callback) {
        chorus::communicator& comm = self.get("isend");
        const buffer data = readable(tensor, "tensor", "isend", memory::host_or_device);
        if (!staged_here(comm, data)) {
          request posted = comm.isend(std::span<const std::byte>(data.data, data.bytes()), peer, tag);
          return started(self, "isend", std::move(posted), any_size, tensor, std::move(callback));
        }
        host_copy staged = staged_copy(data.bytes());
        without_gil([&] { copy_elements(comm, data.data, data.bytes(), staged->data()); });
        request posted = comm.isend(std::span<const std::byte>(*staged), peer, tag);
        return started(self, "isend", std::move(posted), any_size, tensor, std::move(callback), {}, staged);
      },
      nb::arg("tensor"), nb::arg("peer"), nb::arg("tag") = 0, nb::arg("callback").none() = nb::none(),
      "Posts a send of `tensor` to `peer`; returns a Request.");
  communicator.def(
      "irecv",
      [](py_communicator& self, nb::handle tensor, int peer, int tag, nb::object callback) {
        chorus::communicator& comm = self.get("irecv");
        const buffer data = writable(tensor, "tensor", "irecv", memory::host_or_device);
        if (!staged_here(comm, data)) {
          request posted = comm.irecv(std::span<std::byte>(data.data, data.bytes()), peer, tag);
          return started(self, "irecv", std::move(posted), data.bytes(), tensor, std::move(callback));
        }
        host_copy staged = staged_copy(data.bytes());
        request posted = comm.irecv(std::span<std::byte>(*staged), peer, tag);
        return started(self, "irecv", std::move(posted), data.bytes(), tensor, std::move(callback), data, staged);
      },
      nb::arg("tensor"), nb::arg("peer"), nb::arg("tag") = 0, nb::arg("callback").none() = nb::none(),
      "Posts a receive of exactly len(tensor) elements from `peer`; returns a Request.");
  communicator.def(
      "irecv_any",
      [](py_communicator& self, nb::handle tensor, int tag, nb::object callback) {
        chorus::communicator& comm = self.get("irecv");
        const buffer data = writable(tensor, "tensor", "irecv", memory::host_or_device);
        host_copy staged = staged_here(comm, data) ? staged_copy(data.bytes()) : nullptr;
        const std::span<std::byte> landing =
            staged ? std::span<std::byte>(*staged) : std::span(data.data, data.bytes());
        request posted = comm.irecv_any(landing, tag);
        return started(self, "irecv", std::move(posted), data.bytes(), tensor, std::move(callback), data, staged,
                       std::make_shared<std::atomic<int>>(-1));
      },
      nb::arg("tensor"), nb::arg("tag") = 0, nb::arg("callback").none() = nb::none(),
      "Posts a receive of exactly len(tensor) elements from whichever rank sends first with `tag`; the "
      "Request's `source` is that rank once done.");
}

}  // namespace chorus::python
