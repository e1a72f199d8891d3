// Reduction operators as small function objects. They combine two values of
// the accumulator type (see element_type.hpp), so the compiler can inline
// and vectorise the inner loop. `avg` combines like `sum` and is divided by
// the number of contributions once, at the end (finalize).
//
// A user-supplied operator is any callable `T(T, T)` that is associative and
// commutative; give it a static `name` to have it reported in logs.
//
// min/max propagate NaN: if either input is NaN the result is NaN, so a
// diverged replica is not hidden by its healthy peers.
#pragma once

#include <chorus/core/host_device.hpp>

#include <cmath>
#include <concepts>
#include <cstddef>
#include <string_view>
#include <type_traits>

namespace chorus::op {

template <class T>
CHORUS_HD constexpr bool is_nan(const T& value) noexcept {
  if constexpr (std::is_floating_point_v<T>)
    return value != value;
  else
    return false;
}

// Integers wrap on overflow (two's complement, as MPI implementations
// behave) instead of being undefined: the arithmetic is done unsigned, at
// least as wide as `unsigned` so that no operand is promoted to int.
template <class T, bool = std::is_integral_v<T>>
struct wrapping {
  using type = T;
};
template <class T>
struct wrapping<T, true> {
  using type = std::make_unsigned_t<std::common_type_t<T, unsigned>>;
};
template <class T>
using wrapping_t = typename wrapping<T>::type;

struct sum {
  static constexpr std::string_view name = "sum";
  template <class T>
  CHORUS_HD constexpr T operator()(T a, T b) const noexcept {
    return static_cast<T>(static_cast<wrapping_t<T>>(a) + static_cast<wrapping_t<T>>(b));
  }
};

struct prod {
  static constexpr std::string_view name = "prod";
  template <class T>
  CHORUS_HD constexpr T operator()(T a, T b) const noexcept {
    return static_cast<T>(static_cast<wrapping_t<T>>(a) * static_cast<wrapping_t<T>>(b));
  }
};

struct min {
  static constexpr std::string_view name = "min";
  template <class T>
  CHORUS_HD constexpr T operator()(T a, T b) const noexcept {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return b < a ? b : a;
  }
};

struct max {
  static constexpr std::string_view name = "max";
  template <class T>
  CHORUS_HD constexpr T operator()(T a, T b) const noexcept {
    if (is_nan(a)) return a;
    if (is_nan(b)) return b;
    return a < b ? b : a;
  }
};

struct avg {
  static constexpr std::string_view name = "avg";
  template <class T>
  CHORUS_HD constexpr T operator()(T a, T b) const noexcept {
    return static_cast<T>(a + b);
  }
  template <class T>
  CHORUS_HD constexpr T finalize(T total, std::size_t contributions) const noexcept {
    return static_cast<T>(total / static_cast<T>(contributions));
  }
};

// premul_sum: each rank's contribution multiplied by `factor` first, the
// product rounded to the element type, then summed: NCCL's
// ncclRedOpCreatePreMulSum, torch's ReduceOp.PREMUL_SUM (FSDP2's gradient
// divide factor). The multiply is each rank's own and the sum is the sum's,
// so every rank ends with the same bits. Floating-point elements only; the
// reducing front doors take the product (collective/machinery/premultiply.hpp), and
// the algorithms see a sum.
struct premul_sum {
  static constexpr std::string_view name = "premul_sum";
  double factor = 1.0;
  template <class T>
  CHORUS_HD constexpr T operator()(T a, T b) const noexcept {
    return static_cast<T>(a + b);
  }
};

template <class Op>
concept premultiplies = std::same_as<std::remove_cvref_t<Op>, premul_sum>;

// The name an operator reports: its static `name`, or "user" for a lambda.
template <class Op>
constexpr std::string_view name_of() noexcept {
  if constexpr (requires { Op::name; })
    return Op::name;
  else
    return "user";
}

// Calls visit(Op{}) with the built-in operator called `name` (as name_of
// names it); false when there is none (a user's operator).
template <class Visit>
bool visit_builtin(std::string_view name, Visit&& visit) {
  if (name == sum::name)
    visit(sum{});
  else if (name == prod::name)
    visit(prod{});
  else if (name == min::name)
    visit(min{});
  else if (name == max::name)
    visit(max{});
  else if (name == avg::name)
    visit(avg{});
  else
    return false;
  return true;
}

// Applies the operator's final step, if it has one (avg divides by n).
template <class Op, class T>
constexpr T finalize(const Op& op, T total, std::size_t contributions) noexcept {
  if constexpr (requires { op.finalize(total, contributions); })
    return op.finalize(total, contributions);
  else
    return total;
}

}  // namespace chorus::op
