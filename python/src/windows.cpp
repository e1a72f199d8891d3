// chorus.Window: a one-sided tensor window over float32 arrays (NumPy,
// torch CPU tensors; flattened, C-contiguous), with the C++ calls: put,
// accumulate, publish, get, update, collect, versions, quiesce, free.
// Every call that can wait releases the GIL. put, accumulate, get and
// update with blocking=False return a chorus.Request (else None).
#include "binding.hpp"
#include "codecs.hpp"

#include <chorus/window/window.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <utility>
#include <vector>

namespace chorus::python {

namespace {

using host_window = chorus::window<chorus::communicator>;

struct py_window {
  chorus::communicator comm;  // the window keeps its own split of it
  std::optional<host_window> win;

  host_window& get() {
    if (!win) throw error(errc::invalid_argument, "the window is freed", {-1, -1, "window"});
    return *win;
  }
};

std::span<const float> floats_in(nb::handle given, const char* role, const char* operation) {
  const buffer seen = readable(given, role, operation);
  if (seen.type != dtype::float32 || seen.boolean)
    throw error(errc::invalid_argument, std::string(role) + " must be a float32 array", {-1, -1, operation});
  return seen.as<const float>();
}
std::span<float> floats_out(nb::handle given, const char* role, const char* operation) {
  const buffer seen = writable(given, role, operation);
  if (seen.type != dtype::float32 || seen.boolean)
    throw error(errc::invalid_argument, std::string(role) + " must be a float32 array", {-1, -1, operation});
  return seen.as<float>();
}

// Weights as a dict {rank: weight} or a list of (rank, weight); None: all.
std::vector<neighbour_weight> weights_of(nb::handle given) {
  std::vector<neighbour_weight> weights;
  if (given.is_none()) return weights;
  if (nb::isinstance<nb::dict>(given)) {
    for (auto [rank, weight] : nb::borrow<nb::dict>(given))
      weights.push_back({nb::cast<int>(rank), nb::cast<double>(weight)});
    return weights;
  }
  for (nb::handle entry : given) {
    const auto pair = nb::cast<std::pair<int, double>>(entry);
    weights.push_back({pair.first, pair.second});
  }
  return weights;
}

// A non-blocking call's request; `keep`: the array it writes into.
std::unique_ptr<pending_request> started(window_request done, nb::object keep = {}) {
  return std::make_unique<pending_request>(std::move(done), std::move(keep));
}

}  // namespace

void bind_windows(nb::module_& m) {
  nb::class_<py_window>(m, "Window",
                        "One-sided tensor window: one slot per source on every rank, put/accumulate into the "
                        "targets' slots, get the sources' published tensors (docs/windows.md).")
      .def(
          "__init__",
          [](py_window* self, py_communicator& comm, nb::handle initial, std::optional<std::vector<int>> sources,
             nb::handle codec, bool error_feedback, bool ordered, bool drop_dead_peers) {
            const std::span<const float> values = floats_in(initial, "initial", "window");
            window_options options{std::move(sources), codec_choice::from(codec, "window").wire, error_feedback,
                                   drop_dead_peers, ordered};
            new (self) py_window{comm.get("window"), std::nullopt};
            try {
              without_gil([&] { self->win.emplace(self->comm, values, std::move(options)); });
            } catch (...) {
              self->~py_window();
              throw;
            }
          },
          nb::arg("comm"), nb::arg("initial"), nb::arg("sources").none() = nb::none(),
          nb::arg("codec").none() = nb::none(), nb::arg("error_feedback") = true, nb::arg("ordered") = false,
          nb::arg("drop_dead_peers") = false,
          "Collective. initial: float32 array (its size is the window's; published at once). sources: the "
          "ranks that write into this rank's slots (default: all others).")
      .def_prop_ro("size", [](py_window& self) { return self.get().size(); })
      .def_prop_ro("sources", [](py_window& self) { return self.get().sources(); })
      .def_prop_ro("targets", [](py_window& self) { return self.get().targets(); })
      .def_prop_rw(
          "p", [](py_window& self) { return self.get().p(); }, [](py_window& self, double p) { self.get().set_p(p); },
          "The weight carried with puts (push-sum).")
      .def(
          "put",
          [](py_window& self, nb::handle values, nb::handle weights, bool blocking) {
            const std::span<const float> data = floats_in(values, "values", "window put");
            const std::vector<neighbour_weight> to = weights_of(weights);
            if (!blocking) return started(without_gil([&] { return self.get().put_nonblocking(data, to); }));
            without_gil([&] { self.get().put(data, to); });
            return std::unique_ptr<pending_request>();
          },
          nb::arg("values"), nb::arg("weights").none() = nb::none(), nb::arg("blocking") = true,
          "weight * values into each target's slot, replacing it (weights: {rank: w}; None: every target, 1). "
          "blocking=False: returns a Request, complete once sent (values may change at once).")
      .def(
          "accumulate",
          [](py_window& self, nb::handle values, nb::handle weights, bool blocking) {
            const std::span<const float> data = floats_in(values, "values", "window accumulate");
            const std::vector<neighbour_weight> to = weights_of(weights);
            if (!blocking) return started(without_gil([&] { return self.get().accumulate_nonblocking(data, to); }));
            without_gil([&] { self.get().accumulate(data, to); });
            return std::unique_ptr<pending_request>();
          },
          nb::arg("values"), nb::arg("weights").none() = nb::none(), nb::arg("blocking") = true,
          "Adds weight * values to each target's slot (blocking=False: returns a Request).")
      .def(
          "publish",
          [](py_window& self, nb::handle values) {
            const std::span<const float> data = floats_in(values, "values", "window publish");
            self.get().publish(data);
          },
          nb::arg("values"), "Replaces this rank's published tensor (what get() reads).")
      .def(
          "get",
          [](py_window& self, nb::handle weights, bool blocking) {
            std::vector<neighbour_weight> from = weights_of(weights);
            if (!blocking) return started(without_gil([&] { return self.get().get_nonblocking(std::move(from)); }));
            without_gil([&] { self.get().get(from); });
            return std::unique_ptr<pending_request>();
          },
          nb::arg("weights").none() = nb::none(), nb::arg("blocking") = true,
          "Reads each source's published tensor (times its weight); blocking=False: on the background thread, "
          "returns a Request.")
      .def(
          "update",
          [](py_window& self, nb::handle out, std::optional<double> self_weight, nb::handle weights, bool reset,
             bool blocking) {
            const std::span<float> target = floats_out(out, "out", "window update");
            std::vector<neighbour_weight> from = weights_of(weights);
            if (!blocking)
              return started(without_gil([&] {
                               return self_weight
                                          ? self.get().update_nonblocking(target, *self_weight, std::move(from), reset)
                                          : self.get().update_nonblocking(target, reset);
                             }),
                             nb::borrow(out));
            without_gil([&] {
              if (self_weight)
                self.get().update(target, *self_weight, from, reset);
              else
                self.get().update(target, reset);
            });
            return std::unique_ptr<pending_request>();
          },
          nb::arg("out"), nb::arg("self_weight").none() = nb::none(), nb::arg("weights").none() = nb::none(),
          nb::arg("reset") = false, nb::arg("blocking") = true,
          "out = self_weight * out + sum of weight * slot value (uniform weights when self_weight is None); "
          "blocking=False: on the background thread (out untouched until then), returns a Request.")
      .def(
          "collect",
          [](py_window& self, bool reset) {
            std::vector<std::tuple<int, std::vector<float>, double>> slots;
            without_gil([&] {
              self.get().collect(
                  [&](int source, std::span<const float> value, double p) {
                    slots.emplace_back(source, std::vector<float>(value.begin(), value.end()), p);
                  },
                  reset);
            });
            nb::dict made;
            for (auto& [source, value, p] : slots)
              made[nb::int_(source)] = nb::make_tuple(numpy_array(std::move(value)), p);
            return made;
          },
          nb::arg("reset") = false, "{source: (a copy of its slot's value, p)} after reading what landed.")
      .def(
          "version", [](py_window& self, int source) { return self.get().version(source); }, nb::arg("source"),
          "Entries landed in the source's slot since the last update or collect.")
      .def(
          "wait_versions",
          [](py_window& self, std::uint64_t count, std::optional<std::vector<int>> sources) {
            const std::vector<int> from = sources.value_or(std::vector<int>{});
            without_gil([&] { self.get().wait_versions(count, from); });
          },
          nb::arg("count") = 1, nb::arg("sources").none() = nb::none(),
          "Waits (bounded by the timeout) for count new versions from each source.")
      .def(
          "in_quiesce",
          [](py_window& self, int target) { return without_gil([&] { return self.get().in_quiesce(target); }); },
          nb::arg("target"),
          "Whether the target has entered quiesce() while this rank has not yet returned from its own.")
      .def(
          "ready", [](py_window& self, int target) { return without_gil([&] { return self.get().ready(target); }); },
          nb::arg("target"),
          "Whether an accumulate to the target would be written at once (nothing waits here for it, the link is "
          "free, the target has room).")
      .def(
          "flush", [](py_window& self) { without_gil([&] { self.get().flush(); }); },
          "Every entry written so far has landed at its target.")
      .def(
          "quiesce", [](py_window& self) { without_gil([&] { self.get().quiesce(); }); },
          "Collective: every put and accumulate made before has landed and been read.")
      .def_prop_ro("dropped", [](py_window& self) { return self.get().dropped(); })
      .def(
          "free",
          [](py_window& self) {
            without_gil([&] {
              if (self.win) self.win->free();
              self.win.reset();
            });
          },
          "Collective: unregisters the window's memory.");
}

}  // namespace chorus::python
