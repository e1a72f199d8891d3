// DLPack arrays as chorus takes them: host memory (or CUDA memory where the
// call allows it: devices.cpp), C-contiguous (a view
// with gaps would be read and written where it is not), one of chorus's
// element types. Nothing is converted: a copy would leave the caller's
// array unchanged by an in-place collective. Also the argument checks the
// collectives share (element types, `algo=`) and NumPy arrays made here.
#include "binding.hpp"

#include <chorus/registry.hpp>

#include <optional>

namespace chorus::python {

namespace {

namespace dl = nb::dlpack;

std::optional<dtype> chorus_type(dl::dtype given, bool& boolean) {
  boolean = false;
  if (given.lanes != 1) return std::nullopt;
  const auto code = static_cast<dl::dtype_code>(given.code);
  switch (code) {
    case dl::dtype_code::Int:
      if (given.bits == 8) return dtype::int8;
      if (given.bits == 16) return dtype::int16;
      if (given.bits == 32) return dtype::int32;
      if (given.bits == 64) return dtype::int64;
      break;
    case dl::dtype_code::UInt:
      if (given.bits == 8) return dtype::uint8;
      if (given.bits == 16) return dtype::uint16;
      if (given.bits == 32) return dtype::uint32;
      if (given.bits == 64) return dtype::uint64;
      break;
    case dl::dtype_code::Float:
      if (given.bits == 16) return dtype::float16;
      if (given.bits == 32) return dtype::float32;
      if (given.bits == 64) return dtype::float64;
      break;
    case dl::dtype_code::Bfloat:
      if (given.bits == 16) return dtype::bfloat16;
      break;
    case dl::dtype_code::Bool:
      if (given.bits == 8) {
        boolean = true;
        return dtype::uint8;
      }
      break;
    default: break;
  }
  return std::nullopt;
}

std::string describe(dl::dtype given) {
  static const char* const names[] = {"int", "uint", "float", "opaque", "bfloat", "complex", "bool"};
  const std::string kind = given.code < 7 ? names[given.code] : "dlpack code " + std::to_string(given.code);
  return kind + std::to_string(given.bits) + (given.lanes != 1 ? "x" + std::to_string(given.lanes) : "");
}

// DLPack device types: host memory (CPU, CUDA pinned), or CUDA memory.
bool in_host_memory(int device) {
  return device == static_cast<int>(nb::device::cpu::value) || device == static_cast<int>(nb::device::cuda_host::value);
}
bool in_device_memory(int device) {
  return device == static_cast<int>(nb::device::cuda::value) ||
         device == static_cast<int>(nb::device::cuda_managed::value);
}

template <class Array>
buffer view(const Array& given, std::string_view role, std::string_view operation, memory where) {
  const auto bad = [&](const std::string& why) {
    return error(errc::invalid_argument, std::string(role) + " " + why, {-1, -1, std::string(operation)});
  };
  const int device = given.device_type();
  buffer seen;
  seen.device = in_device_memory(device);
  if (seen.device && where == memory::host)
    throw bad("is in CUDA memory, and " + std::string(operation) +
              " reads it on the host: pass a host array (.cpu()); the collectives and point-to-point calls take "
              "device arrays");
  if (!seen.device && !in_host_memory(device))
    throw bad("is in memory chorus cannot reach (DLPack device type " + std::to_string(device) +
              "): host arrays, and CUDA arrays in the collectives");
  if (const auto type = chorus_type(given.dtype(), seen.boolean))
    seen.type = *type;
  else
    throw bad("has element type " + describe(given.dtype()) +
              ", which chorus has not (int8-64, uint8-64, float16, bfloat16, float32, float64, bool)");
  // C-contiguous: each stride the product of the sizes after it; a
  // dimension of size 1 may have any stride, an empty array any strides.
  seen.count = given.size();
  if (seen.count > 0) {
    std::int64_t expected = 1;
    for (std::size_t d = given.ndim(); d-- > 0;) {
      if (given.shape(d) != 1 && given.stride(d) != expected)
        throw bad("is not contiguous (a strided view): pass .contiguous() or a copy, and copy the result back");
      expected *= static_cast<std::int64_t>(given.shape(d));
    }
  }
  seen.data = reinterpret_cast<std::byte*>(const_cast<void*>(static_cast<const void*>(given.data())));
  if (seen.device) take_device_array(seen.data, seen.bytes(), given.device_id(), role, operation);
  return seen;
}

error not_an_array(nb::handle given, std::string_view role, std::string_view operation, const char* why) {
  std::string text = std::string(role) + " (" + nb::type_name(given.type()).c_str() + ") " + why;
  if (nb::hasattr(given, "requires_grad") && nb::cast<bool>(given.attr("requires_grad")))
    text += ": it requires grad; pass tensor.detach()";
  return error(errc::invalid_argument, text, {-1, -1, std::string(operation)});
}

// torch's C++ export of a tensor (torch._C._to_dlpack) rather than its
// Python __dlpack__, whose checks and, on a CUDA tensor, two stream lookups
// cost several microseconds a call, a third of a small collective's time
// from Python. Streams are chorus's to order (the caller's, devices.cpp). A
// tensor that requires grad is taken, as torch's own process groups take it
// (and as nanobind's fallback to torch.utils.dlpack.to_dlpack did). A lazy
// negated or conjugated view is refused: its memory holds the values before
// the negation, and DLPack cannot say so. Anything else (a sparse layout, a
// subclass) goes the usual way, to its usual error. None where torch is not
// imported or the object is not a torch.Tensor.
nb::object torch_export(nb::handle given, std::string_view role, std::string_view operation) {
  struct torch_parts {
    nb::handle tensor;  // torch.Tensor
    nb::object strided, to_dlpack;
  };
  static const torch_parts* known = nullptr;  // never freed: outlives the interpreter's teardown
  if (known == nullptr) {
    nb::object torch = nb::steal(PyImport_GetModule(nb::str("torch").ptr()));
    if (!torch.is_valid()) {
      PyErr_Clear();
      return {};
    }
    if (!nb::hasattr(torch, "_C") || !nb::hasattr(torch.attr("_C"), "_to_dlpack")) return {};
    known = new torch_parts{torch.attr("Tensor").inc_ref(), torch.attr("strided"), torch.attr("_C").attr("_to_dlpack")};
  }
  if (!nb::isinstance(given, known->tensor)) return {};
  if (nb::cast<bool>(given.attr("is_neg")()) || nb::cast<bool>(given.attr("is_conj")()))
    throw error(errc::invalid_argument,
                std::string(role) + " is a lazy negated or conjugated view: pass .resolve_neg() or .resolve_conj()",
                {-1, -1, std::string(operation)});
  if (given.type().ptr() != known->tensor.ptr() || !given.attr("layout").is(known->strided)) return {};
  return known->to_dlpack(given);
}

template <class Array>
bool take(nb::handle given, Array& taken, std::string_view role, std::string_view operation) {
  if (nb::object exported = torch_export(given, role, operation); exported.is_valid())
    return nb::try_cast(exported, taken, false);
  return nb::try_cast(given, taken, false);
}

}  // namespace

buffer writable(nb::handle given, std::string_view role, std::string_view operation, memory where) {
  array taken;
  if (take(given, taken, role, operation)) return view(taken, role, operation, where);
  const_array read_only;
  if (nb::try_cast(given, read_only, false))
    throw not_an_array(given, role, operation, "is read-only, and chorus writes into it");
  throw not_an_array(given, role, operation, "is not an array (NumPy, torch or another DLPack exporter)");
}

buffer readable(nb::handle given, std::string_view role, std::string_view operation, memory where) {
  const_array taken;
  if (take(given, taken, role, operation)) return view(taken, role, operation, where);
  throw not_an_array(given, role, operation, "is not an array (NumPy, torch or another DLPack exporter)");
}

float_array numpy_array(std::vector<float> values) {
  auto* owned = new std::vector<float>(std::move(values));
  nb::capsule owner(owned, [](void* held) noexcept { delete static_cast<std::vector<float>*>(held); });
  return {owned->data(), {owned->size()}, owner};
}

float_array numpy_array(std::span<const float> values) {
  return numpy_array(std::vector<float>(values.begin(), values.end()));
}

algorithm algorithm_named(const std::string& name, std::string_view collective) {
  const algorithm chosen = parse_algorithm(name, "algo");
  return chosen.is_automatic() ? chosen : registered(collective).offered(chosen, "algo").id;
}

void require_same_type(const buffer& a, const buffer& b, std::string_view operation) {
  if (a.type != b.type || a.boolean != b.boolean)
    throw error(errc::invalid_argument,
                "input and output have different element types (" + std::string(to_string(a.type)) + ", " +
                    std::string(to_string(b.type)) + ")",
                {-1, -1, std::string(operation)});
}

}  // namespace chorus::python
