// The collectives that move data without reducing it: broadcast and
// allgather (plain, or float32 through a codec), alltoall, gather, scatter,
// blocking and non-blocking.
#include "binding.hpp"
#include "codecs.hpp"

#include <chorus/collective/allgather/allgather.hpp>
#include <chorus/collective/alltoall/alltoall.hpp>
#include <chorus/collective/broadcast/broadcast.hpp>
#include <chorus/collective/gather/gather.hpp>
#include <chorus/collective/scatter/scatter.hpp>
#include <chorus/compressed/compressed_allgather.hpp>

#include <chorus/nccl/collectives.hpp>

#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

namespace chorus::python {

namespace {

void require_float32(const buffer& seen, const codec_choice& wire, std::string_view operation) {
  if (wire.feedback)
    throw error(errc::invalid_argument, "error feedback is for reductions; pass the codec itself",
                {-1, -1, std::string(operation)});
  require_codec_input(seen, operation);
}

// Calls f(span<const T> in, span<T> out) with the arrays' element type.
template <class F>
void visit_pair(const buffer& in, const buffer& out, F&& f) {
  visit_element_type(in.type, [&](auto element) {
    using T = decltype(element);
    f(std::span<const T>(in.as<T>()), out.as<T>());
  });
}

struct broadcast_call {
  buffer data;
  int root = 0;
  algorithm forced = algorithm::automatic;
  codec_choice wire;

  template <class Comm>
  algorithm run(Comm& comm) const {
    if (wire.active()) {
      wire.visit_codec(
          [&](const auto& coder) { chorus::broadcast(runs_on<false>(comm), data.as<float>(), root, coder); });
      return algorithm::automatic;
    }
    algorithm ran = algorithm::automatic;
    visit_element_type(data.type,
                       [&](auto element) { ran = broadcast(comm, data.as<decltype(element)>(), root, forced); });
    return ran;
  }
};

broadcast_call checked_broadcast(nb::handle tensor, int root, const std::string& algo, nb::handle codec,
                                 const char* operation) {
  broadcast_call call{writable(tensor, "tensor", operation, memory::host_or_device), root,
                      algorithm_named(algo, "broadcast"), codec_choice::from(codec, operation)};
  if (call.wire.active()) require_float32(call.data, call.wire, operation);
  return call;
}

struct allgather_call {
  buffer mine, all;
  algorithm forced = algorithm::automatic;
  codec_choice wire;

  template <class Comm>
  algorithm run(Comm& comm) const {
    if (wire.active()) {
      wire.visit_codec([&](const auto& coder) {
        chorus::allgather(runs_on<false>(comm), mine.as<const float>(), all.as<float>(), coder);
      });
      return algorithm::automatic;
    }
    algorithm ran = algorithm::automatic;
    visit_pair(mine, all, [&](auto in, auto out) { ran = allgather(comm, in, out, forced); });
    return ran;
  }
};

allgather_call checked_allgather(nb::handle tensor, nb::handle output, const std::string& algo, nb::handle codec,
                                 const char* operation) {
  allgather_call call{readable(tensor, "tensor", operation, memory::host_or_device),
                      writable(output, "output", operation, memory::host_or_device), algorithm_named(algo, "allgather"),
                      codec_choice::from(codec, operation)};
  require_same_type(call.mine, call.all, operation);
  if (call.wire.active()) require_float32(call.mine, call.wire, operation);
  return call;
}

struct pair_call {
  buffer in, out;
  int root = 0;
};

template <class Comm>
void run_alltoall(Comm& comm, const pair_call& call) {
  visit_pair(call.in, call.out, [&](auto in, auto out) { alltoall(comm, in, out); });
}

// Gather and scatter read `out`/`in` only at the root: elsewhere None is
// an empty array.
buffer at_root_or_empty(nb::handle given, const buffer& like, bool writable_array, const char* role,
                        const char* operation) {
  if (!given.is_none())
    return writable_array ? writable(given, role, operation, memory::host_or_device)
                          : readable(given, role, operation, memory::host_or_device);
  buffer empty = like;
  empty.count = 0;
  return empty;
}

// Bound on both communicator classes (binding.hpp: Holder).
template <class Holder>
void bind_movements_on(nb::class_<Holder>& communicator) {
  communicator.def(
      "broadcast",
      [](Holder& self, nb::handle tensor, int root, const std::string& algo, nb::handle codec) {
        auto& comm = self.get("broadcast");
        const broadcast_call call = checked_broadcast(tensor, root, algo, codec, "broadcast");
        const algorithm ran = without_gil([&] { return call.run(comm); });
        self.last_algorithm = call.wire.active() ? std::string(call.wire.name()) : std::string(to_string(ran));
        return self.last_algorithm;
      },
      nb::arg("tensor"), nb::arg("root"), nb::arg("algo") = "auto", nb::arg("codec").none() = nb::none(),
      "Copies `root`'s `tensor` into every rank's.");
  communicator.def(
      "ibroadcast",
      [](Holder& self, nb::handle tensor, int root, const std::string& algo, nb::handle codec, nb::object callback) {
        const broadcast_call call = checked_broadcast(tensor, root, algo, codec, "ibroadcast");
        return start_collective(
            self, "ibroadcast", [call](auto& c) { call.run(c); }, nb::make_tuple(tensor, codec), std::move(callback));
      },
      nb::arg("tensor"), nb::arg("root"), nb::arg("algo") = "auto", nb::arg("codec").none() = nb::none(),
      nb::arg("callback").none() = nb::none(), "broadcast started on the background thread; returns a Request.");

  communicator.def(
      "allgather",
      [](Holder& self, nb::handle tensor, nb::handle output, const std::string& algo, nb::handle codec) {
        auto& comm = self.get("allgather");
        const allgather_call call = checked_allgather(tensor, output, algo, codec, "allgather");
        const algorithm ran = without_gil([&] { return call.run(comm); });
        self.last_algorithm = call.wire.active() ? std::string(call.wire.name()) : std::string(to_string(ran));
        return self.last_algorithm;
      },
      nb::arg("tensor"), nb::arg("output"), nb::arg("algo") = "auto", nb::arg("codec").none() = nb::none(),
      "Every rank's `tensor`, in rank order, into every rank's `output` (size x len(tensor) elements).");
  communicator.def(
      "iallgather",
      [](Holder& self, nb::handle tensor, nb::handle output, const std::string& algo, nb::handle codec,
         nb::object callback) {
        const allgather_call call = checked_allgather(tensor, output, algo, codec, "iallgather");
        return start_collective(
            self, "iallgather", [call](auto& c) { call.run(c); }, nb::make_tuple(tensor, output, codec),
            std::move(callback));
      },
      nb::arg("tensor"), nb::arg("output"), nb::arg("algo") = "auto", nb::arg("codec").none() = nb::none(),
      nb::arg("callback").none() = nb::none(), "allgather started on the background thread; returns a Request.");

  communicator.def(
      "alltoall",
      [](Holder& self, nb::handle input, nb::handle output) {
        auto& comm = self.get("alltoall");
        const pair_call call{readable(input, "input", "alltoall", memory::host_or_device),
                             writable(output, "output", "alltoall", memory::host_or_device)};
        require_same_type(call.in, call.out, "alltoall");
        without_gil([&] { run_alltoall(comm, call); });
        self.last_algorithm = to_string(algorithm::pairwise);
        return self.last_algorithm;
      },
      nb::arg("input"), nb::arg("output"),
      "Block r of `input` goes to rank r; block r of `output` comes from rank r (equal blocks).");
  communicator.def(
      "ialltoall",
      [](Holder& self, nb::handle input, nb::handle output, nb::object callback) {
        const pair_call call{readable(input, "input", "ialltoall", memory::host_or_device),
                             writable(output, "output", "ialltoall", memory::host_or_device)};
        require_same_type(call.in, call.out, "ialltoall");
        return start_collective(
            self, "ialltoall", [call](auto& c) { run_alltoall(c, call); }, nb::make_tuple(input, output),
            std::move(callback));
      },
      nb::arg("input"), nb::arg("output"), nb::arg("callback").none() = nb::none(),
      "alltoall started on the background thread; returns a Request.");

  communicator.def(
      "gather",
      [](Holder& self, nb::handle tensor, nb::handle output, int root) {
        auto& comm = self.get("gather");
        pair_call call{readable(tensor, "tensor", "gather", memory::host_or_device), {}, root};
        call.out = at_root_or_empty(output, call.in, true, "output", "gather");
        if (!output.is_none()) require_same_type(call.in, call.out, "gather");
        without_gil([&] { visit_pair(call.in, call.out, [&](auto in, auto out) { gather(comm, in, out, root); }); });
      },
      nb::arg("tensor"), nb::arg("output").none(), nb::arg("root"),
      "Every rank's `tensor`, in rank order, into `output` on `root` (None elsewhere).");
  communicator.def(
      "scatter",
      [](Holder& self, nb::handle input, nb::handle output, int root) {
        auto& comm = self.get("scatter");
        pair_call call{{}, writable(output, "output", "scatter", memory::host_or_device), root};
        call.in = at_root_or_empty(input, call.out, false, "input", "scatter");
        if (!input.is_none()) require_same_type(call.in, call.out, "scatter");
        without_gil([&] { visit_pair(call.in, call.out, [&](auto in, auto out) { scatter(comm, in, out, root); }); });
      },
      nb::arg("input").none(), nb::arg("output"), nb::arg("root"),
      "Block r of `input` on `root` (None elsewhere) into rank r's `output`.");
}

}  // namespace

void bind_movements(nb::class_<py_communicator>& communicator) { bind_movements_on(communicator); }
void bind_movements(nb::class_<py_nccl_communicator>& communicator) { bind_movements_on(communicator); }

}  // namespace chorus::python
