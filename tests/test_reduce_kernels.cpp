// The local reduction kernels (collective/machinery/reduce_local.hpp) at every vector
// width this CPU runs, against a serial reference written here: the same
// bits, for every operator and element type, at sizes around the lane block.
#include <chorus/collective/machinery/reduce_local.hpp>
#include <chorus/core/reduce_op.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace {

namespace kernel = chorus::collective::kernel;

std::string to_text(chorus::simd::width w) { return std::string(chorus::simd::to_string(w)); }

template <class T>
std::vector<T> random_values(std::size_t count, std::mt19937& random) {
  std::vector<T> values(count);
  if constexpr (std::is_floating_point_v<T>) {
    std::uniform_real_distribution<T> uniform(-3, 3);
    for (T& value : values) value = uniform(random);
    // Values whose sums round, and the specials, where a kernel that
    // reordered or fused would show.
    if (count > 3) {
      values[1] = std::numeric_limits<T>::infinity();
      values[2] = std::numeric_limits<T>::quiet_NaN();
      values[count - 1] = T(1e-30);
    }
  } else {
    std::uniform_int_distribution<long long> uniform(std::numeric_limits<T>::min(), std::numeric_limits<T>::max());
    for (T& value : values) value = static_cast<T>(uniform(random));
  }
  return values;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

const std::size_t sizes[] = {0, 1, 15, 16, 17, 33, 1000, 4099};

template <class T, class Op>
void check_kernels(const Op& op) {
  std::mt19937 random(11);
  for (const std::size_t n : sizes) {
    for (std::size_t k = 1; k <= 5; ++k) {
      std::vector<std::vector<T>> inputs;
      std::vector<const T*> pointers;
      for (std::size_t j = 0; j < k; ++j) inputs.push_back(random_values<T>(n, random));
      for (const auto& input : inputs) pointers.push_back(input.data());
      std::vector<T> expected(n);
      for (std::size_t i = 0; i < n; ++i) {
        T value = inputs[0][i];
        for (std::size_t j = 1; j < k; ++j) value = op(value, inputs[j][i]);
        expected[i] = value;
      }
      for (const kernel::width w : chorus::simd::runnable_widths()) {
        CAPTURE(to_text(w));
        CAPTURE(n);
        CAPTURE(k);
        std::vector<T> out(n);
        kernel::reduce_many_at(w, std::span(out), std::span<const T* const>(pointers), op);
        CHECK(same_bits(out, expected));
        std::vector<T> in_place = inputs[0];  // the output is the first input
        std::vector<const T*> aliased = pointers;
        aliased[0] = in_place.data();
        kernel::reduce_many_at(w, std::span(in_place), std::span<const T* const>(aliased), op);
        CHECK(same_bits(in_place, expected));
      }
    }
    const std::vector<T> accumulate = random_values<T>(n, random), incoming = random_values<T>(n, random);
    for (const bool incoming_is_lower : {false, true}) {
      std::vector<T> expected(n);
      for (std::size_t i = 0; i < n; ++i)
        expected[i] = incoming_is_lower ? op(incoming[i], accumulate[i]) : op(accumulate[i], incoming[i]);
      for (const kernel::width w : chorus::simd::runnable_widths()) {
        CAPTURE(to_text(w));
        CAPTURE(n);
        CAPTURE(incoming_is_lower);
        std::vector<T> out = accumulate;
        kernel::reduce_into_at(w, std::span(out), std::span<const T>(incoming), op, incoming_is_lower);
        CHECK(same_bits(out, expected));
      }
    }
  }
}

template <class T>
void check_every_operator() {
  check_kernels<T>(chorus::op::sum{});
  check_kernels<T>(chorus::op::prod{});
  check_kernels<T>(chorus::op::min{});
  check_kernels<T>(chorus::op::max{});
}

}  // namespace

TEST_CASE("reduction kernels: every vector width gives the serial reference's bits") {
  MESSAGE("widest vector width here: " << to_text(chorus::simd::widest()));
  check_every_operator<float>();
  check_every_operator<double>();
  check_every_operator<std::int32_t>();
  check_every_operator<std::int64_t>();
  check_every_operator<std::int8_t>();
  check_every_operator<std::uint16_t>();
}

TEST_CASE("reduction kernels: the dispatching front functions") {
  std::vector<float> out(37, 1.0f);
  const std::vector<float> incoming(37, 2.0f), third(37, 4.0f);
  chorus::collective::reduce_into(std::span(out), std::span<const float>(incoming), chorus::op::sum{}, false);
  for (const float value : out) CHECK(value == 3.0f);
  const float* inputs[] = {out.data(), incoming.data(), third.data()};
  chorus::collective::reduce_many(std::span(out), std::span<const float* const>(inputs), chorus::op::max{});
  for (const float value : out) CHECK(value == 4.0f);
}
