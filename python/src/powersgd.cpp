// chorus.PowerSGD: PowerSGD's state for one list of gradient tensors (its
// Q and error per matrix, kept between steps), and the communicator's
// powersgd / ipowersgd that average the tensors through it
// (compressed/powersgd.hpp). The DDP hook chorus.torch.hooks.powersgd keeps
// one state per bucket.
#include "binding.hpp"

#include <chorus/compressed/powersgd.hpp>

#include <nanobind/stl/pair.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace chorus::python {

namespace {

struct py_powersgd {
  chorus::powersgd state;
};

// The float32 arrays to average, viewed where they are; valid while `given` lives.
std::vector<std::span<float>> gradients_in(nb::handle given, const char* operation) {
  std::vector<std::span<float>> spans;
  for (nb::handle tensor : given) {
    const buffer seen = writable(tensor, "gradient", operation);
    if (seen.type != dtype::float32 || seen.boolean)
      throw error(errc::invalid_argument, "PowerSGD averages float32 arrays, not " + std::string(to_string(seen.type)),
                  {-1, -1, operation});
    spans.push_back(seen.as<float>());
  }
  return spans;
}

}  // namespace

void bind_powersgd(nb::module_& m, nb::class_<py_communicator>& communicator) {
  nb::class_<py_powersgd>(m, "PowerSGD",
                          "PowerSGD's state for one list of gradient tensors: their shapes as (rows, cols) matrices "
                          "(a vector: (1, n), averaged exactly), the rank r, error feedback, warm start and the "
                          "seed of the first Q (the same on every rank).")
      .def(
          "__init__",
          [](py_powersgd* self, const std::vector<std::pair<std::size_t, std::size_t>>& shapes, std::size_t rank,
             bool error_feedback, bool warm_start, std::uint64_t seed) {
            std::vector<matrix_shape> matrices;
            for (const auto& [rows, cols] : shapes) matrices.push_back({rows, cols});
            new (self) py_powersgd{chorus::powersgd(std::move(matrices), {rank, error_feedback, warm_start, seed})};
          },
          nb::arg("shapes"), nb::arg("rank") = 2, nb::arg("error_feedback") = true, nb::arg("warm_start") = true,
          nb::arg("seed") = 0)
      .def_prop_ro(
          "floats_per_step", [](const py_powersgd& self) { return self.state.floats_per_step(); },
          "Floats each rank puts into the two allreduces per step.")
      .def(
          "compressed", [](const py_powersgd& self, std::size_t tensor) { return self.state.compressed(tensor); },
          nb::arg("tensor"), "Whether that tensor travels as rank-r factors (else exactly).");

  communicator.def(
      "powersgd",
      [](py_communicator& self, py_powersgd& state, nb::handle tensors) {
        chorus::communicator& comm = self.get("powersgd");
        const std::vector<std::span<float>> gradients = gradients_in(tensors, "powersgd");
        without_gil([&] { state.state.average(comm, std::span<const std::span<float>>(gradients)); });
      },
      nb::arg("state"), nb::arg("tensors"),
      "Averages the float32 `tensors` over all ranks in place through the PowerSGD `state`.");
  communicator.def(
      "ipowersgd",
      [](py_communicator& self, nb::handle state, nb::handle tensors, nb::object callback) {
        py_powersgd& held = nb::cast<py_powersgd&>(state);
        std::vector<std::span<float>> gradients = gradients_in(tensors, "ipowersgd");
        return start_collective(
            self, "ipowersgd",
            [&held, gradients = std::move(gradients)](chorus::communicator& c) {
              held.state.average(c, std::span<const std::span<float>>(gradients));
            },
            nb::make_tuple(state, tensors), std::move(callback));
      },
      nb::arg("state"), nb::arg("tensors"), nb::arg("callback").none() = nb::none(),
      "powersgd started on the communicator's background thread (the state and the tensors are kept until it is "
      "done); returns a Request.");
}

}  // namespace chorus::python
