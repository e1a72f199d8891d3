// Element types that chorus moves and reduces, and what is known about each:
// a runtime tag (for headers on the wire, mismatch checks and tool output),
// its name, its size, and the type reductions accumulate in (half and
// bfloat16 accumulate in float and round once at the end).
#pragma once

#include <chorus/core/bfloat16.hpp>
#include <chorus/core/half.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

namespace chorus {

enum class dtype : std::uint8_t {
  int8,
  int16,
  int32,
  int64,
  uint8,
  uint16,
  uint32,
  uint64,
  float16,
  bfloat16,
  float32,
  float64,
};

template <class T>
struct element_traits;  // undefined for types chorus does not know

#define CHORUS_ELEMENT(type, tag, accumulate)      \
  template <>                                      \
  struct element_traits<type> {                    \
    static constexpr dtype id = dtype::tag;        \
    static constexpr std::string_view name = #tag; \
    using accumulator = accumulate;                \
  };
CHORUS_ELEMENT(std::int8_t, int8, std::int8_t)
CHORUS_ELEMENT(std::int16_t, int16, std::int16_t)
CHORUS_ELEMENT(std::int32_t, int32, std::int32_t)
CHORUS_ELEMENT(std::int64_t, int64, std::int64_t)
CHORUS_ELEMENT(std::uint8_t, uint8, std::uint8_t)
CHORUS_ELEMENT(std::uint16_t, uint16, std::uint16_t)
CHORUS_ELEMENT(std::uint32_t, uint32, std::uint32_t)
CHORUS_ELEMENT(std::uint64_t, uint64, std::uint64_t)
CHORUS_ELEMENT(half, float16, float)
CHORUS_ELEMENT(bfloat16, bfloat16, float)
CHORUS_ELEMENT(float, float32, float)
CHORUS_ELEMENT(double, float64, double)
#undef CHORUS_ELEMENT

template <class T>
concept element = requires { element_traits<std::remove_cv_t<T>>::id; } && std::is_trivially_copyable_v<T>;

template <element T>
inline constexpr dtype dtype_of = element_traits<std::remove_cv_t<T>>::id;

template <element T>
using accumulator_t = typename element_traits<std::remove_cv_t<T>>::accumulator;

constexpr std::size_t size_of(dtype type) noexcept {
  switch (type) {
    case dtype::int8:
    case dtype::uint8: return 1;
    case dtype::int16:
    case dtype::uint16:
    case dtype::float16:
    case dtype::bfloat16: return 2;
    case dtype::int32:
    case dtype::uint32:
    case dtype::float32: return 4;
    case dtype::int64:
    case dtype::uint64:
    case dtype::float64: return 8;
  }
  return 0;
}

// Calls visit(T{}) with the element type tagged `type` (code that holds a
// type only at run time: the direct path's device kernels).
template <class Visit>
void visit_element_type(dtype type, Visit&& visit) {
  switch (type) {
    case dtype::int8: return visit(std::int8_t{});
    case dtype::int16: return visit(std::int16_t{});
    case dtype::int32: return visit(std::int32_t{});
    case dtype::int64: return visit(std::int64_t{});
    case dtype::uint8: return visit(std::uint8_t{});
    case dtype::uint16: return visit(std::uint16_t{});
    case dtype::uint32: return visit(std::uint32_t{});
    case dtype::uint64: return visit(std::uint64_t{});
    case dtype::float16: return visit(half{});
    case dtype::bfloat16: return visit(bfloat16{});
    case dtype::float32: return visit(float{});
    case dtype::float64: return visit(double{});
  }
}

constexpr std::string_view to_string(dtype type) noexcept {
  switch (type) {
    case dtype::int8: return "int8";
    case dtype::int16: return "int16";
    case dtype::int32: return "int32";
    case dtype::int64: return "int64";
    case dtype::uint8: return "uint8";
    case dtype::uint16: return "uint16";
    case dtype::uint32: return "uint32";
    case dtype::uint64: return "uint64";
    case dtype::float16: return "float16";
    case dtype::bfloat16: return "bfloat16";
    case dtype::float32: return "float32";
    case dtype::float64: return "float64";
  }
  return "unknown";
}

}  // namespace chorus
