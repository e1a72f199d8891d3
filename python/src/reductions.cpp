// The reducing collectives on arrays: allreduce (plain or through a codec,
// with or without error feedback), reduce and reduce_scatter, blocking and
// non-blocking. Ops by name: sum, prod, min, max, avg, and for integer and
// bool arrays band, bor, bxor (chorus's user-operator path).
#include "binding.hpp"
#include "codecs.hpp"

#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/collective/reduce/reduce.hpp>
#include <chorus/collective/reduce_scatter/reduce_scatter.hpp>
#include <chorus/compressed/compressed_allreduce.hpp>

#include <chorus/nccl/collectives.hpp>
#include <chorus/nccl/nccl_compressed_allreduce.hpp>

#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <type_traits>

namespace chorus::python {

namespace {

struct bitwise_and {
  static constexpr std::string_view name = "band";
  template <class T>
  T operator()(T a, T b) const noexcept {
    return static_cast<T>(a & b);
  }
};
struct bitwise_or {
  static constexpr std::string_view name = "bor";
  template <class T>
  T operator()(T a, T b) const noexcept {
    return static_cast<T>(a | b);
  }
};
struct bitwise_xor {
  static constexpr std::string_view name = "bxor";
  template <class T>
  T operator()(T a, T b) const noexcept {
    return static_cast<T>(a ^ b);
  }
};

// A bool array is bytes of 0 and 1: "sum" and "max" are "or", "prod" and
// "min" are "and", as torch's backends treat them.
std::string_view boolean_op(std::string_view name, std::string_view operation) {
  if (name == "sum" || name == "max" || name == "bor") return "max";
  if (name == "prod" || name == "min" || name == "band") return "min";
  if (name == "bxor") return "bxor";
  throw error(errc::invalid_argument, "op '" + std::string(name) + "' has no meaning on a bool array",
              {-1, -1, std::string(operation)});
}

// NCCL has no bitwise reductions: on an NCCL communicator they run over chorus.
template <class Op>
constexpr bool nccl_reduces =
    !std::is_same_v<Op, bitwise_and> && !std::is_same_v<Op, bitwise_or> && !std::is_same_v<Op, bitwise_xor>;

// Calls f(op) with the operator called `name` for element type T.
template <class T, class F>
void visit_op(std::string_view name, bool boolean, std::string_view operation, F&& f) {
  if (boolean) name = boolean_op(name, operation);
  if (op::visit_builtin(name, f)) return;
  if constexpr (std::is_integral_v<T>) {
    if (name == bitwise_and::name) return f(bitwise_and{});
    if (name == bitwise_or::name) return f(bitwise_or{});
    if (name == bitwise_xor::name) return f(bitwise_xor{});
  }
  throw error(errc::invalid_argument,
              "op '" + std::string(name) + "' for " + std::string(to_string(dtype_of<T>)) +
                  " (sum, prod, min, max, avg; band, bor, bxor on integer and bool arrays)",
              {-1, -1, std::string(operation)});
}

// Calls f(span<const T> in, span<T> out, op) with the arrays' element type.
template <class F>
void visit_reduction(const buffer& in, const buffer& out, std::string_view name, std::string_view operation, F&& f) {
  visit_element_type(in.type, [&](auto element) {
    using T = decltype(element);
    visit_op<T>(name, in.boolean, operation, [&](auto op) { f(std::span<const T>(in.as<T>()), out.as<T>(), op); });
  });
}

// One reduction's arguments, checked with the GIL held; run() may then go
// on any thread.
struct allreduce_call {
  buffer in, out;
  std::string op;
  algorithm forced = algorithm::automatic;
  codec_choice wire;

  template <class Comm>
  algorithm run(Comm& comm) const {
    if (wire.active()) return run_compressed(comm);
    algorithm ran = algorithm::automatic;
    visit_reduction(in, out, op, "allreduce", [&](auto input, auto output, auto reduction) {
      auto& on = runs_on<nccl_reduces<decltype(reduction)>>(comm);
      ran = input.data() == output.data() ? allreduce(on, output, reduction, forced)
                                          : allreduce(on, input, output, reduction, forced);
    });
    return ran;
  }

  // A codec sums or averages float32: the input is copied to the output
  // first, then reduced there.
  template <class Comm>
  algorithm run_compressed(Comm& comm) const {
    const std::span<float> data = out.as<float>();
    if (in.data != out.data) copy_elements(host_of(comm), in.as<const float>().data(), in.count, data.data());
    compression_options told;
    if (forced != algorithm::automatic) told.scheme = compressed::as_scheme(forced);
    return wire.visit([&](auto& coder) {
      return op == "avg" ? allreduce(comm, data, op::avg{}, coder, told)
                         : allreduce(comm, data, op::sum{}, coder, told);
    });
  }
};

allreduce_call checked_allreduce(nb::handle tensor, nb::handle output, const std::string& op, const std::string& algo,
                                 nb::handle codec, const char* operation) {
  allreduce_call call;
  call.out = output.is_none() ? writable(tensor, "tensor", operation, memory::host_or_device)
                              : writable(output, "output", operation, memory::host_or_device);
  call.in = output.is_none() ? call.out : readable(tensor, "tensor", operation, memory::host_or_device);
  require_same_type(call.in, call.out, operation);
  if (call.in.count != call.out.count)
    throw error(errc::invalid_argument,
                "input has " + std::to_string(call.in.count) + " elements, output " + std::to_string(call.out.count),
                {-1, -1, operation});
  call.op = op;
  call.wire = codec_choice::from(codec, operation);
  if (call.wire.active()) {
    require_codec_input(call.in, operation);
    if (op != "sum" && op != "avg")
      throw error(errc::invalid_argument, "a compressed allreduce sums or averages, not '" + op + "'",
                  {-1, -1, operation});
    if (algo != "auto" && algo != "ring" && algo != "once" && algo != "encode_once")
      throw error(errc::invalid_argument, "a compressed allreduce runs 'ring' or 'once', not '" + algo + "'",
                  {-1, -1, operation});
    call.forced = parse_algorithm(algo, "algo");
  } else {
    call.forced = algorithm_named(algo, "allreduce");
  }
  return call;
}

struct rooted_call {
  buffer in, out;
  std::string op;
  int root = 0;
};

// Bound on both communicator classes (binding.hpp: Holder).
template <class Holder>
void bind_reductions_on(nb::class_<Holder>& communicator) {
  communicator.def(
      "allreduce",
      [](Holder& self, nb::handle tensor, nb::handle output, const std::string& op, const std::string& algo,
         nb::handle codec) {
        auto& comm = self.get("allreduce");
        const allreduce_call call = checked_allreduce(tensor, output, op, algo, codec, "allreduce");
        self.last_algorithm = to_string(without_gil([&] { return call.run(comm); }));
        return self.last_algorithm;
      },
      nb::arg("tensor"), nb::arg("output").none() = nb::none(), nb::arg("op") = "sum", nb::arg("algo") = "auto",
      nb::arg("codec").none() = nb::none(),
      "Reduces `tensor` over all ranks, into `output` if given (else in place); returns the algorithm that ran.");

  communicator.def(
      "iallreduce",
      [](Holder& self, nb::handle tensor, nb::handle output, const std::string& op, const std::string& algo,
         nb::handle codec, nb::object callback) {
        const allreduce_call call = checked_allreduce(tensor, output, op, algo, codec, "iallreduce");
        return start_collective(
            self, "iallreduce", [call](auto& c) { call.run(c); }, nb::make_tuple(tensor, output, codec),
            std::move(callback));
      },
      nb::arg("tensor"), nb::arg("output").none() = nb::none(), nb::arg("op") = "sum", nb::arg("algo") = "auto",
      nb::arg("codec").none() = nb::none(), nb::arg("callback").none() = nb::none(),
      "allreduce started on the communicator's background thread; returns a Request.");

  communicator.def(
      "reduce",
      [](Holder& self, nb::handle tensor, int root, nb::handle output, const std::string& op) {
        auto& comm = self.get("reduce");
        rooted_call call{writable(tensor, "tensor", "reduce", memory::host_or_device), {}, op, root};
        call.out = output.is_none() ? call.in : writable(output, "output", "reduce", memory::host_or_device);
        require_same_type(call.in, call.out, "reduce");
        self.last_algorithm = to_string(without_gil([&] {
          algorithm ran = algorithm::automatic;
          visit_reduction(call.in, call.out, call.op, "reduce", [&](auto in, auto out, auto reduction) {
            ran = reduce(runs_on<nccl_reduces<decltype(reduction)>>(comm), in, out, call.root, reduction);
          });
          return ran;
        }));
        return self.last_algorithm;
      },
      nb::arg("tensor"), nb::arg("root"), nb::arg("output").none() = nb::none(), nb::arg("op") = "sum",
      "Reduces `tensor` over all ranks into `output` (else `tensor`) on `root`; other ranks' outputs are "
      "left as they were.");

  const auto reduce_scatter_into = [](auto& comm, const rooted_call& call, algorithm forced) {
    algorithm ran = algorithm::automatic;
    visit_reduction(call.in, call.out, call.op, "reduce_scatter", [&](auto in, auto out, auto reduction) {
      ran = reduce_scatter(runs_on<nccl_reduces<decltype(reduction)>>(comm), in, out, reduction, forced);
    });
    return ran;
  };
  communicator.def(
      "reduce_scatter",
      [reduce_scatter_into](Holder& self, nb::handle input, nb::handle output, const std::string& op,
                            const std::string& algo) {
        auto& comm = self.get("reduce_scatter");
        const rooted_call call{readable(input, "input", "reduce_scatter", memory::host_or_device),
                               writable(output, "output", "reduce_scatter", memory::host_or_device), op, 0};
        require_same_type(call.in, call.out, "reduce_scatter");
        const algorithm forced = algorithm_named(algo, "reduce_scatter");
        self.last_algorithm = to_string(without_gil([&] { return reduce_scatter_into(comm, call, forced); }));
        return self.last_algorithm;
      },
      nb::arg("input"), nb::arg("output"), nb::arg("op") = "sum", nb::arg("algo") = "auto",
      "Reduces `input` (size x len(output) elements) over all ranks; block r of the result lands in rank r's "
      "`output`.");

  communicator.def(
      "ireduce_scatter",
      [reduce_scatter_into](Holder& self, nb::handle input, nb::handle output, const std::string& op,
                            const std::string& algo, nb::object callback) {
        const rooted_call call{readable(input, "input", "ireduce_scatter", memory::host_or_device),
                               writable(output, "output", "ireduce_scatter", memory::host_or_device), op, 0};
        require_same_type(call.in, call.out, "ireduce_scatter");
        const algorithm forced = algorithm_named(algo, "reduce_scatter");
        return start_collective(
            self, "ireduce_scatter",
            [call, forced, reduce_scatter_into](auto& c) { reduce_scatter_into(c, call, forced); },
            nb::make_tuple(input, output), std::move(callback));
      },
      nb::arg("input"), nb::arg("output"), nb::arg("op") = "sum", nb::arg("algo") = "auto",
      nb::arg("callback").none() = nb::none(), "reduce_scatter started on the background thread; returns a Request.");
}

}  // namespace

void bind_reductions(nb::class_<py_communicator>& communicator) { bind_reductions_on(communicator); }
void bind_reductions(nb::class_<py_nccl_communicator>& communicator) { bind_reductions_on(communicator); }

}  // namespace chorus::python
