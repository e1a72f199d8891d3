// half and bfloat16 conversions against an independent reference: the value
// of every encoding computed with ldexp in double, and round-to-nearest-even
// found by binary search over the encodings (ordered like their values).
// The span conversions (core/convert.hpp) at every vector width this CPU
// runs give the scalar conversions' bits.
#include <chorus/core/bfloat16.hpp>
#include <chorus/core/convert.hpp>
#include <chorus/core/half.hpp>

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

namespace {

struct format {
  int mantissa_bits;
  int exponent_bias;
  std::uint16_t infinity;  // encoding of +inf; also one past the largest finite
};
constexpr format half_format{10, 15, 0x7c00};
constexpr format bfloat16_format{7, 127, 0x7f80};

// The value of a positive encoding; +inf counts as the next power of two,
// which is exactly how IEEE rounding treats overflow.
double value_of(const format& f, std::uint16_t bits) {
  const int exponent = bits >> f.mantissa_bits;
  const int mantissa = bits & ((1 << f.mantissa_bits) - 1);
  const int scale = f.exponent_bias + f.mantissa_bits;  // value = significand * 2^(exponent - scale)
  if (exponent == 0) return std::ldexp(mantissa, 1 - scale);
  return std::ldexp((1 << f.mantissa_bits) + mantissa, exponent - scale);
}

std::uint16_t reference_encode(const format& f, float input) {
  const double magnitude = std::fabs(static_cast<double>(input));
  const std::uint16_t sign = std::signbit(input) ? 0x8000 : 0;
  std::uint16_t low = 0, high = f.infinity;  // value(low) <= magnitude < value(high) after search
  if (magnitude >= value_of(f, f.infinity)) return sign | f.infinity;
  while (high - low > 1) {
    const auto middle = static_cast<std::uint16_t>((low + high) / 2);
    (value_of(f, middle) <= magnitude ? low : high) = middle;
  }
  const double below = magnitude - value_of(f, low);
  const double above = value_of(f, high) - magnitude;
  const bool round_up = above < below || (above == below && (low & 1));
  return static_cast<std::uint16_t>(sign | (round_up ? high : low));
}

float float_of(std::uint32_t bits) { return std::bit_cast<float>(bits); }

// Floats where rounding decisions happen: each encoding's value, its float
// neighbours, the midpoint to the next encoding and the midpoint's neighbours.
std::vector<float> decision_points(const format& f) {
  std::vector<float> points;
  for (std::uint32_t bits = 0; bits < f.infinity; ++bits) {
    const auto code = static_cast<std::uint16_t>(bits);
    const auto exact = static_cast<float>(value_of(f, code));
    const auto midpoint =
        static_cast<float>((value_of(f, code) + value_of(f, static_cast<std::uint16_t>(code + 1))) / 2);
    for (float point : {exact, midpoint}) {
      for (float candidate : {point, std::nextafter(point, 0.0f), std::nextafter(point, INFINITY)}) {
        points.push_back(candidate);
        points.push_back(-candidate);
      }
    }
  }
  return points;
}

}  // namespace

TEST_CASE("half: known encodings") {
  CHECK(chorus::half(1.0f).bits() == 0x3c00);
  CHECK(chorus::half(-2.0f).bits() == 0xc000);
  CHECK(chorus::half(65504.0f).bits() == 0x7bff);
  CHECK(chorus::half(0.333333343f).bits() == 0x3555);
  CHECK(chorus::half(6.10351562e-05f).bits() == 0x0400);  // smallest normal
  CHECK(chorus::half(5.96046448e-08f).bits() == 0x0001);  // smallest subnormal
  CHECK(chorus::half(0.0f).bits() == 0x0000);
  CHECK(chorus::half(-0.0f).bits() == 0x8000);
  CHECK(static_cast<float>(chorus::half::from_bits(0x3555)) == 0.333251953125f);
}

TEST_CASE("half: overflow, underflow and ties round to nearest even") {
  CHECK(chorus::half(65519.996f).bits() == 0x7bff);
  CHECK(chorus::half(65520.0f).bits() == 0x7c00);  // tie between 65504 (odd) and 65536 -> inf
  CHECK(chorus::half(-1e10f).bits() == 0xfc00);
  CHECK(chorus::half(std::numeric_limits<float>::max()).bits() == 0x7c00);
  CHECK(chorus::half(std::ldexp(1.0f, -25)).bits() == 0x0000);  // tie with 2^-24 -> even zero
  CHECK(chorus::half(std::nextafter(std::ldexp(1.0f, -25), 1.0f)).bits() == 0x0001);
  CHECK(chorus::half(std::ldexp(3.0f, -25)).bits() == 0x0002);             // 1.5 units: tie -> even 2
  CHECK(chorus::half(1.0f + std::ldexp(1.0f, -11)).bits() == 0x3c00);      // tie -> even
  CHECK(chorus::half(1.0f + 3 * std::ldexp(1.0f, -11)).bits() == 0x3c02);  // tie -> even
  CHECK(chorus::half(std::numeric_limits<float>::denorm_min()).bits() == 0x0000);
  CHECK(chorus::half(-std::numeric_limits<float>::denorm_min()).bits() == 0x8000);
}

TEST_CASE("half: infinities and NaN") {
  CHECK(chorus::half(INFINITY).bits() == 0x7c00);
  CHECK(chorus::half(-INFINITY).bits() == 0xfc00);
  CHECK(chorus::half(std::numeric_limits<float>::quiet_NaN()).is_nan());
  // A signalling NaN whose payload sits only in bits that half drops must
  // stay NaN, not become infinity.
  const chorus::half from_signalling(float_of(0x7f800001u));
  CHECK(from_signalling.is_nan());
  CHECK((from_signalling.bits() & 0x0200) != 0);                // quiet
  CHECK(chorus::half(float_of(0xffc00000u)).bits() == 0xfe00);  // sign kept
  CHECK(std::isnan(static_cast<float>(chorus::half::from_bits(0x7e00))));
  CHECK(std::isinf(static_cast<float>(chorus::half::from_bits(0xfc00))));
}

TEST_CASE("half: every encoding converts to float exactly and back unchanged") {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto h = chorus::half::from_bits(static_cast<std::uint16_t>(bits));
    const float f = h;
    const std::uint16_t magnitude = bits & 0x7fff;
    if (magnitude > 0x7c00) {
      REQUIRE(std::isnan(f));
      if (bits & 0x0200) REQUIRE(chorus::half(f).bits() == bits);  // quiet NaN: identical
      continue;
    }
    const double expected =
        (bits & 0x8000 ? -1.0 : 1.0) * (magnitude == 0x7c00 ? INFINITY : value_of(half_format, magnitude));
    REQUIRE(static_cast<double>(f) == expected);
    REQUIRE(std::signbit(f) == ((bits & 0x8000) != 0));
    REQUIRE(chorus::half(f).bits() == bits);
  }
}

TEST_CASE("half: rounding at every decision point matches the reference") {
  for (float input : decision_points(half_format)) {
    CAPTURE(input);
    REQUIRE(chorus::half(input).bits() == reference_encode(half_format, input));
  }
}

TEST_CASE("half and bfloat16: random floats match the reference") {
  std::mt19937 random(20261121);
  for (int i = 0; i < 1000000; ++i) {
    const float input = float_of(static_cast<std::uint32_t>(random()));
    if (std::isnan(input)) {
      REQUIRE(chorus::half(input).is_nan());
      REQUIRE(chorus::bfloat16(input).is_nan());
      continue;
    }
    CAPTURE(input);
    REQUIRE(chorus::half(input).bits() == reference_encode(half_format, input));
    REQUIRE(chorus::bfloat16(input).bits() == reference_encode(bfloat16_format, input));
  }
}

#ifdef __FLT16_MANT_DIG__
TEST_CASE("half: agrees with the compiler's _Float16 conversion") {
  for (float input : decision_points(half_format)) {
    const _Float16 native = static_cast<_Float16>(input);
    REQUIRE(chorus::half(input).bits() == std::bit_cast<std::uint16_t>(native));
  }
}
#endif

TEST_CASE("bfloat16: known encodings and ties") {
  CHECK(chorus::bfloat16(1.0f).bits() == 0x3f80);
  CHECK(chorus::bfloat16(3.14159265f).bits() == 0x4049);
  CHECK(chorus::bfloat16(-2.0f).bits() == 0xc000);
  CHECK(chorus::bfloat16(1.0f + std::ldexp(1.0f, -8)).bits() == 0x3f80);      // tie -> even
  CHECK(chorus::bfloat16(1.0f + 3 * std::ldexp(1.0f, -8)).bits() == 0x3f82);  // tie -> even
  CHECK(chorus::bfloat16(std::numeric_limits<float>::max()).bits() == 0x7f80);
  CHECK(chorus::bfloat16(float_of(0x00008000u)).bits() == 0x0000);  // subnormal tie -> even
  CHECK(chorus::bfloat16(float_of(0x00018000u)).bits() == 0x0002);
  CHECK(chorus::bfloat16(float_of(0x80010000u)).bits() == 0x8001);
  CHECK(chorus::bfloat16(-INFINITY).bits() == 0xff80);
}

TEST_CASE("bfloat16: NaN stays NaN") {
  const chorus::bfloat16 from_signalling(float_of(0x7f800001u));
  CHECK(from_signalling.is_nan());
  CHECK(chorus::bfloat16(float_of(0xffc00000u)).bits() == 0xffc0);
  CHECK(std::isnan(static_cast<float>(chorus::bfloat16::from_bits(0x7fc1))));
}

TEST_CASE("bfloat16: every encoding converts to float exactly and back unchanged") {
  for (std::uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const auto b = chorus::bfloat16::from_bits(static_cast<std::uint16_t>(bits));
    const float f = b;
    if (b.is_nan()) {
      REQUIRE(std::isnan(f));
      if (bits & 0x0040) REQUIRE(chorus::bfloat16(f).bits() == bits);
      continue;
    }
    const std::uint16_t magnitude = bits & 0x7fff;
    const double expected =
        (bits & 0x8000 ? -1.0 : 1.0) * (magnitude == 0x7f80 ? INFINITY : value_of(bfloat16_format, magnitude));
    REQUIRE(static_cast<double>(f) == expected);
    REQUIRE(chorus::bfloat16(f).bits() == bits);
  }
}

TEST_CASE("bfloat16: rounding at every decision point matches the reference") {
  for (float input : decision_points(bfloat16_format)) {
    CAPTURE(input);
    REQUIRE(chorus::bfloat16(input).bits() == reference_encode(bfloat16_format, input));
  }
}

namespace {

// Floats around every 16-bit format's decision points and specials: a
// stride through all 2^32 encodings, the rounding decision points of both
// formats, and random bits (NaNs with payloads, subnormals, both signs).
std::vector<float> floats_to_narrow() {
  std::vector<float> values;
  for (std::uint64_t bits = 0; bits < (std::uint64_t{1} << 32); bits += 65521)
    values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(bits)));
  for (const format& f : {half_format, bfloat16_format})
    for (float input : decision_points(f)) values.insert(values.end(), {input, -input});
  std::mt19937 random(7);
  for (int i = 0; i < 100000; ++i) values.push_back(std::bit_cast<float>(static_cast<std::uint32_t>(random())));
  return values;
}

template <class Narrow>
void check_span_conversions() {
  std::vector<Narrow> every(65536);
  for (std::uint32_t bits = 0; bits < 65536; ++bits) every[bits] = Narrow::from_bits(static_cast<std::uint16_t>(bits));
  const std::vector<float> wide_inputs = floats_to_narrow();
  for (const auto w : chorus::simd::runnable_widths()) {
    CAPTURE(std::string(chorus::simd::to_string(w)));
    // Lengths around the 8-lane blocks, so that the tails run too.
    for (const std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{9},
                                std::size_t{23}, every.size()}) {
      CAPTURE(n);
      std::vector<float> widened(n, -1.0f);
      chorus::convert_at(w, std::span<const Narrow>(every.data(), n), std::span<float>(widened));
      for (std::size_t i = 0; i < n; ++i) {
        const auto expected = std::bit_cast<std::uint32_t>(static_cast<float>(every[i]));
        const auto got = std::bit_cast<std::uint32_t>(widened[i]);
        // F16C widens a signalling NaN to a quiet one; nothing else may differ.
        const bool nan = every[i].is_nan();
        REQUIRE((nan ? (got | 0x400000u) == (expected | 0x400000u) : got == expected));
      }
    }
    std::vector<Narrow> narrowed(wide_inputs.size());
    chorus::convert_at(w, std::span<const float>(wide_inputs), std::span<Narrow>(narrowed));
    for (std::size_t i = 0; i < wide_inputs.size(); ++i) {
      CAPTURE(wide_inputs[i]);
      REQUIRE(narrowed[i].bits() == Narrow(wide_inputs[i]).bits());
    }
  }
}

}  // namespace

TEST_CASE("convert: half spans at every vector width give the scalar conversions' bits") {
  check_span_conversions<chorus::half>();
}

TEST_CASE("convert: bfloat16 spans at every vector width give the scalar conversions' bits") {
  check_span_conversions<chorus::bfloat16>();
}

TEST_CASE("convert: same type copies, onto itself and shifted within one buffer") {
  std::vector<float> buffer{1, 2, 3, 4, 5, 6};
  chorus::convert(std::span<const float>(buffer), std::span<float>(buffer));
  CHECK(buffer == std::vector<float>{1, 2, 3, 4, 5, 6});
  chorus::convert(std::span<const float>(buffer.data(), 4), std::span<float>(buffer.data() + 2, 4));
  CHECK(buffer == std::vector<float>{1, 2, 1, 2, 3, 4});
  std::vector<int> numbers{7, -8};
  std::vector<double> widened(2);
  chorus::convert(std::span<const int>(numbers), std::span<double>(widened));
  CHECK(widened == std::vector<double>{7.0, -8.0});
}
