// Point-to-point on arrays: send and recv, and isend/irecv, which post the
// transfer at once (so sends and receives posted together cannot deadlock)
// and complete it on the communicator's completion thread. A receive takes
// exactly the array's bytes; another size is a chorus.Mismatch.
#include "binding.hpp"

#include <nanobind/stl/unique_ptr.h>

namespace chorus::python {

namespace {

using request = chorus::communicator::request;

std::unique_ptr<pending_request> started(py_communicator& self, const char* operation, request posted,
                                         std::size_t expected, nb::handle tensor, nb::object callback) {
  auto handle = std::make_shared<request>(std::move(posted));
  return start_completion(
      self, operation,
      [handle, expected, operation](chorus::communicator& c) {
        c.wait(*handle, operation);
        if (expected != static_cast<std::size_t>(-1)) c.expect_bytes(*handle, expected, operation);
      },
      nb::borrow(tensor), std::move(callback));
}

}  // namespace

void bind_point_to_point(nb::class_<py_communicator>& communicator) {
  communicator.def(
      "send",
      [](py_communicator& self, nb::handle tensor, int peer, int tag) {
        chorus::communicator& comm = self.get("send");
        const buffer data = readable(tensor, "tensor", "send");
        without_gil([&] { comm.send(std::span<const std::byte>(data.data, data.bytes()), peer, tag); });
      },
      nb::arg("tensor"), nb::arg("peer"), nb::arg("tag") = 0, "Sends `tensor` to `peer`; returns once sent.");
  communicator.def(
      "recv",
      [](py_communicator& self, nb::handle tensor, int peer, int tag) {
        chorus::communicator& comm = self.get("recv");
        const buffer data = writable(tensor, "tensor", "recv");
        without_gil([&] { comm.recv(std::span<std::byte>(data.data, data.bytes()), peer, tag); });
      },
      nb::arg("tensor"), nb::arg("peer"), nb::arg("tag") = 0,
      "Receives exactly len(tensor) elements from `peer` into `tensor`.");
  communicator.def(
      "isend",
      [](py_communicator& self, nb::handle tensor, int peer, int tag, nb::object callback) {
        chorus::communicator& comm = self.get("isend");
        const buffer data = readable(tensor, "tensor", "isend");
        request posted = comm.isend(std::span<const std::byte>(data.data, data.bytes()), peer, tag);
        return started(self, "isend", std::move(posted), static_cast<std::size_t>(-1), tensor, std::move(callback));
      },
      nb::arg("tensor"), nb::arg("peer"), nb::arg("tag") = 0, nb::arg("callback").none() = nb::none(),
      "Posts a send of `tensor` to `peer`; returns a Request.");
  communicator.def(
      "irecv",
      [](py_communicator& self, nb::handle tensor, int peer, int tag, nb::object callback) {
        chorus::communicator& comm = self.get("irecv");
        const buffer data = writable(tensor, "tensor", "irecv");
        request posted = comm.irecv(std::span<std::byte>(data.data, data.bytes()), peer, tag);
        return started(self, "irecv", std::move(posted), data.bytes(), tensor, std::move(callback));
      },
      nb::arg("tensor"), nb::arg("peer"), nb::arg("tag") = 0, nb::arg("callback").none() = nb::none(),
      "Posts a receive of exactly len(tensor) elements from `peer`; returns a Request.");
  communicator.def(
      "irecv_any",
      [](py_communicator& self, nb::handle tensor, int tag, nb::object callback) {
        chorus::communicator& comm = self.get("irecv");
        const buffer data = writable(tensor, "tensor", "irecv");
        auto handle = std::make_shared<request>(comm.irecv_any(std::span<std::byte>(data.data, data.bytes()), tag));
        auto source = std::make_shared<std::atomic<int>>(-1);
        const std::size_t expected = data.bytes();
        return start_completion(
            self, "irecv",
            [handle, source, expected](chorus::communicator& c) {
              c.wait(*handle, "irecv");
              c.expect_bytes(*handle, expected, "irecv");
              source->store(c.source_of(*handle));
            },
            nb::borrow(tensor), std::move(callback), source);
      },
      nb::arg("tensor"), nb::arg("tag") = 0, nb::arg("callback").none() = nb::none(),
      "Posts a receive of exactly len(tensor) elements from whichever rank sends first with `tag`; the "
      "Request's `source` is that rank once done.");
}

}  // namespace chorus::python
