// Codecs on one process: bit patterns, paths, sizes, stated bounds, error feedback.
#include <chorus/codec.hpp>
#include <chorus/codec/spec.hpp>

#include "expect_error.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace codec = chorus::codec;
using codec::simd_path;

namespace {

template <class C>
std::vector<std::byte> encoded(const C& c, const std::vector<float>& values) {
  std::vector<std::byte> bytes(c.encoded_bytes(values.size()));
  c.encode(values, bytes);
  return bytes;
}

template <class C>
std::vector<float> round_trip(const C& c, const std::vector<float>& values) {
  std::vector<float> out(values.size());
  c.decode(encoded(c, values), out);
  return out;
}

std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }
float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }
float half_value(std::uint16_t h) { return std::bit_cast<float>(chorus::detail::half_bits_to_float_bits(h)); }

std::vector<float> random_values(std::size_t n, float spread, unsigned seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

// Inputs meant to break codecs: every magnitude class, signed zeros, ties,
// one huge outlier in a block of tiny values, constant blocks, subnormals.
std::vector<float> adversarial(std::size_t n) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    switch (i % 9) {
      case 0: v[i] = 0.0f; break;
      case 1: v[i] = -0.0f; break;
      case 2: v[i] = std::ldexp(1.0f, static_cast<int>(i % 60) - 30); break;
      case 3: v[i] = -std::ldexp(1.5f, static_cast<int>(i % 40) - 20); break;
      case 4: v[i] = 1.0f + 0x1p-11f; break;  // an fp16 tie
      case 5: v[i] = std::numeric_limits<float>::denorm_min() * static_cast<float>(i); break;
      case 6: v[i] = i % 256 == 6 ? 3.0e4f : 1e-6f; break;  // outlier among small ones
      case 7: v[i] = 7.0f; break;
      default: v[i] = -65000.0f + static_cast<float>(i); break;
    }
  }
  return v;
}

// The edges of the two-byte formats, with both signs, repeated past the
// 16-element vector step: values that round up to inf (and saturate), the
// largest that do not, inf, NaNs whose payload is only in the dropped bits,
// subnormals and ties.
std::vector<float> format_edges(std::size_t n) {
  const std::uint32_t edges[] = {0x7f7fffffu, 0x7f7f8000u, 0x7f7f7fffu, 0x7f800000u, 0x7f800001u, 0x7fa00000u,
                                 0x7fc00000u, 0x477fe000u, 0x477fefffu, 0x477ff000u, 0x00000001u, 0x00800000u,
                                 0x3f808000u, 0x3f818000u, 0x33000000u, 0x387fc000u, 0x00000000u};
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::uint32_t sign = (i / std::size(edges)) % 2 ? 0x80000000u : 0u;
    v[i] = from_bits(edges[i % std::size(edges)] | sign);
  }
  return v;
}

// Runs of 64 values from 2^-95 down into the subnormals: blocks whose largest
// magnitude is tiny, where a scale such as 127 / max|x| overflows.
std::vector<float> tiny_values(std::size_t n, unsigned seed) {
  std::vector<float> v = random_values(n, 1.0f, seed);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::ldexp(v[i], -95 - static_cast<int>((i / 64) % 55));
  return v;
}

template <class C>
std::size_t outside_bound(const C& c, const std::vector<float>& values) {
  const std::vector<float> decoded = round_trip(c, values);
  std::vector<float> bound(values.size());
  c.error_bound(values, bound);
  std::size_t outside = 0;
  for (std::size_t i = 0; i < values.size(); ++i)
    if (!(std::fabs(static_cast<double>(decoded[i]) - values[i]) <= bound[i])) ++outside;
  return outside;
}

bool same_bytes(const void* a, const void* b, std::size_t n) { return n == 0 || std::memcmp(a, b, n) == 0; }

template <class C>
void paths_agree(const C& vector_path, const C& portable, const std::vector<float>& values) {
  const std::string codec_name(C::name);
  CAPTURE(codec_name);
  const auto a = encoded(vector_path, values), b = encoded(portable, values);
  CHECK(same_bytes(a.data(), b.data(), a.size()));
  std::vector<float> da(values.size()), db(values.size());
  vector_path.decode(a, da);
  portable.decode(a, db);
  CHECK(same_bytes(da.data(), db.data(), da.size() * sizeof(float)));
  // Accumulating into NaN: which of two NaNs an addition returns depends on
  // operand order, which the compiler chooses for the portable loop; any NaN
  // counts as the same there, every other result must match bit for bit.
  std::vector<float> acc_a(values.begin(), values.end()), acc_b(values.begin(), values.end());
  vector_path.decode_add(a, acc_a);
  portable.decode_add(a, acc_b);
  std::size_t differing = 0;
  for (std::size_t i = 0; i < values.size(); ++i)
    differing += std::isnan(acc_a[i]) ? !std::isnan(acc_b[i]) : bits_of(acc_a[i]) != bits_of(acc_b[i]);
  CHECK(differing == 0);
}

}  // namespace

TEST_CASE("fp16: every half value round-trips through float, on both paths") {
  std::vector<float> all(65536);
  for (std::uint32_t h = 0; h < 65536; ++h) all[h] = half_value(static_cast<std::uint16_t>(h));
  for (simd_path path : {simd_path::portable, simd_path::avx2}) {
    CAPTURE(codec::to_string(path));
    const codec::fp16 c(codec::overflow::infinity, path);
    const auto bytes = encoded(c, all);
    std::size_t different = 0;
    for (std::uint32_t h = 0; h < 65536; ++h) {
      std::uint16_t got;
      std::memcpy(&got, bytes.data() + 2 * h, 2);
      const bool nan = std::isnan(all[h]);
      // NaN comes back quiet with its payload's top bits: a signalling NaN gains the quiet bit.
      const std::uint16_t want = nan ? static_cast<std::uint16_t>(h | 0x200u) : static_cast<std::uint16_t>(h);
      different += got != want;
    }
    CHECK(different == 0);
  }
}

TEST_CASE("fp16: round to nearest even, overflow policy, inf and NaN kept") {
  const codec::fp16 saturating, ieee(codec::overflow::infinity);
  const std::vector<float> in = {1.0f + 0x1p-11f,             // tie -> even (1.0)
                                 1.0f + 3 * 0x1p-11f,         // tie -> even (1 + 2^-9)
                                 1.0f + 0x1p-11f + 0x1p-20f,  // above the tie -> up
                                 0x1p-25f,                    // tie with zero -> 0
                                 0x1p-25f + 0x1p-40f,         // -> smallest subnormal
                                 3 * 0x1p-25f,                // subnormal tie -> even (2^-23)
                                 65519.0f,
                                 65520.0f,
                                 -1e9f,
                                 std::numeric_limits<float>::infinity(),
                                 std::numeric_limits<float>::quiet_NaN()};
  const auto s = round_trip(saturating, in), e = round_trip(ieee, in);
  CHECK(s[0] == 1.0f);
  CHECK(s[1] == 1.0f + 0x1p-9f);
  CHECK(s[2] == 1.0f + 0x1p-10f);
  CHECK(bits_of(s[3]) == 0u);
  CHECK(s[4] == 0x1p-24f);
  CHECK(s[5] == 0x1p-23f);
  CHECK(s[6] == 65504.0f);
  CHECK(s[7] == 65504.0f);
  CHECK(s[8] == -65504.0f);
  CHECK(e[7] == std::numeric_limits<float>::infinity());
  CHECK(e[8] == -std::numeric_limits<float>::infinity());
  CHECK(s[9] == std::numeric_limits<float>::infinity());  // inf stays inf even when saturating
  CHECK(std::isnan(s[10]));
  CHECK(std::isnan(e[10]));
}

TEST_CASE("bf16: round to nearest even, saturation near float max, NaN quiet") {
  const codec::bf16 saturating, ieee(codec::overflow::infinity);
  const std::vector<float> in = {from_bits(0x3f808000u),  // tie, even below -> 0x3f80
                                 from_bits(0x3f818000u),  // tie, odd below -> 0x3f82
                                 from_bits(0x3f808001u),  // above tie -> 0x3f81
                                 std::numeric_limits<float>::max(),
                                 from_bits(0x7fa00001u) /* signalling NaN */,
                                 std::numeric_limits<float>::denorm_min()};
  const auto s = round_trip(saturating, in), e = round_trip(ieee, in);
  CHECK(bits_of(s[0]) == 0x3f800000u);
  CHECK(bits_of(s[1]) == 0x3f820000u);
  CHECK(bits_of(s[2]) == 0x3f810000u);
  CHECK(bits_of(s[3]) == 0x7f7f0000u);
  CHECK(bits_of(e[3]) == 0x7f800000u);
  CHECK(bits_of(s[4]) == 0x7fe00000u);
  CHECK(bits_of(s[5]) == 0u);
}

TEST_CASE("vector and portable paths give the same bits for every codec") {
  if (!codec::cpu_has_avx2()) {
    MESSAGE("this CPU has no AVX2/F16C: only the portable path runs here");
    return;
  }
  REQUIRE(codec::fp16(codec::overflow::saturate, simd_path::avx2).path() == simd_path::avx2);
  REQUIRE(codec::onebit(256, simd_path::portable).path() == simd_path::portable);
  for (std::size_t n : {0u, 1u, 7u, 8u, 255u, 256u, 1000u, 4099u}) {
    CAPTURE(n);
    for (const auto& values :
         {random_values(n, 3.0f, 1), adversarial(n), random_values(n, 1e5f, 2), tiny_values(n, 6), format_edges(n)}) {
      for (auto policy : {codec::overflow::saturate, codec::overflow::infinity}) {
        paths_agree(codec::fp16(policy, simd_path::avx2), codec::fp16(policy, simd_path::portable), values);
        paths_agree(codec::bf16(policy, simd_path::avx2), codec::bf16(policy, simd_path::portable), values);
      }
      for (std::size_t block : {8u, 64u, 256u}) {
        paths_agree(codec::int8(block, simd_path::avx2), codec::int8(block, simd_path::portable), values);
        paths_agree(codec::onebit(block, simd_path::avx2), codec::onebit(block, simd_path::portable), values);
      }
    }
  }
}

TEST_CASE("encoded sizes") {
  CHECK(codec::identity{}.encoded_bytes(10) == 40);
  CHECK(codec::fp16{}.encoded_bytes(0) == 0);
  CHECK(codec::fp16{}.encoded_bytes(1001) == 2002);
  CHECK(codec::bf16{}.encoded_bytes(3) == 6);
  CHECK(codec::int8{256}.encoded_bytes(512) == 2 * (4 + 256));
  CHECK(codec::int8{256}.encoded_bytes(513) == 2 * (4 + 256) + 4 + 1);
  CHECK(codec::int8{64}.encoded_bytes(0) == 0);
  CHECK(codec::onebit{256}.encoded_bytes(256) == 8 + 32);
  CHECK(codec::onebit{256}.encoded_bytes(257) == 8 + 32 + 8 + 1);
  CHECK(codec::onebit{8}.encoded_bytes(20) == 2 * (8 + 1) + 8 + 1);
  CHECK(codec::fp8_e4m3{}.encoded_bytes(64) == 2 * 33);
  CHECK(codec::fp8_e5m2{}.encoded_bytes(1) == 2);
  CHECK(codec::fp4_e2m1{}.encoded_bytes(0) == 0);
  CHECK(codec::fp4_e2m1{}.encoded_bytes(1) == 2);
  CHECK(codec::fp4_e2m1{}.encoded_bytes(33) == 17 + 2);
  CHECK(codec::fp4_e2m1{}.encoded_bytes(35) == 17 + 3);
  chorus_test::expect_error([] { codec::fp4_e2m1 bad(20); }, chorus::errc::invalid_argument,
                            "fp4_e2m1: block size 20 must be a positive multiple of 8");
  chorus_test::expect_error([] { codec::int8 bad(0); }, chorus::errc::invalid_argument, "block size 0");
  chorus_test::expect_error([] { codec::onebit bad(12); }, chorus::errc::invalid_argument, "multiple of 8");
  std::vector<float> values(10);
  std::vector<std::byte> small(19);
  chorus_test::expect_error([&] { codec::fp16{}.encode(values, small); }, chorus::errc::invalid_argument,
                            "10 elements take 20 bytes, the buffer has 19");
}

TEST_CASE("every codec stays within its stated bound on random and adversarial inputs") {
  for (std::size_t n : {1u, 9u, 256u, 4099u}) {
    CAPTURE(n);
    for (const auto& values :
         {random_values(n, 1.0f, 3), random_values(n, 2e4f, 4), adversarial(n), tiny_values(n, 7)}) {
      CHECK(outside_bound(codec::identity{}, values) == 0);
      CHECK(outside_bound(codec::fp16{}, values) == 0);
      CHECK(outside_bound(codec::fp16{codec::overflow::infinity}, values) == 0);
      CHECK(outside_bound(codec::bf16{}, values) == 0);
      CHECK(outside_bound(codec::int8{}, values) == 0);
      CHECK(outside_bound(codec::int8{8}, values) == 0);
      CHECK(outside_bound(codec::onebit{}, values) == 0);
      CHECK(outside_bound(codec::onebit{16}, values) == 0);
      CHECK(outside_bound(codec::fp8_e4m3{}, values) == 0);
      CHECK(outside_bound(codec::fp8_e5m2{8}, values) == 0);
      CHECK(outside_bound(codec::fp4_e2m1{}, values) == 0);
      CHECK(outside_bound(codec::fp4_e2m1{256}, values) == 0);
      CHECK(outside_bound(codec::topk{0.01}, values) == 0);
      CHECK(outside_bound(codec::topk{0.3}, values) == 0);
      CHECK(outside_bound(codec::randomk{0.1}, values) == 0);
    }
  }
}

TEST_CASE("the bounds are tight enough to mean something") {
  const auto values = random_values(4096, 1.0f, 5);
  std::vector<float> bound(values.size());
  codec::fp16{}.error_bound(values, bound);
  for (std::size_t i = 0; i < values.size(); ++i)
    CHECK(bound[i] <= std::max(std::fabs(values[i]) * 0x1p-11f, 0x1p-25f));
  codec::int8{}.error_bound(values, bound);
  for (float b : bound) CHECK(b < 0.05f);  // max |x| of a block of 256 normals is ~3.5: step/2 ~ 0.014
}

namespace {

// What a minifloat code means, straight from the format's definition
// (sign, biased exponent, mantissa; subnormals at exponent field 0), in double.
struct minifloat_reference {
  int exponent_bits, mantissa_bits, bias;

  int codes() const { return 1 << (1 + exponent_bits + mantissa_bits); }
  double value(int code) const {
    const int sign = code >> (exponent_bits + mantissa_bits), field = (code >> mantissa_bits) & ((1 << exponent_bits) - 1);
    const int mantissa = code & ((1 << mantissa_bits) - 1);
    const double magnitude = field == 0 ? std::ldexp(mantissa, 1 - bias - mantissa_bits)
                                        : std::ldexp(1.0 + std::ldexp(mantissa, -mantissa_bits), field - bias);
    return sign ? -magnitude : magnitude;
  }
  // The code nearest x * 2^-k over the magnitudes up to `largest`, ties to the even code; -0 for negative x.
  int nearest(double x, int k, int largest) const {
    const double y = std::ldexp(std::fabs(x), -k);
    int best = 0;
    for (int c = 1; c <= largest; ++c) {
      const double here = std::fabs(value(c) - y), there = std::fabs(value(best) - y);
      if (here < there || (here == there && c % 2 == 0)) best = c;
    }
    return best | (std::signbit(x) ? 1 << (exponent_bits + mantissa_bits) : 0);
  }
};

template <class C>
minifloat_reference reference_of() {
  return {C::format.exponent_bits, C::format.mantissa_bits, C::format.bias};
}

// The codes of a block as the codec wrote them (one byte, or nibbles low first).
template <class C>
int code_in(const std::vector<std::byte>& bytes, std::size_t i) {
  const int bits = 1 + C::format.exponent_bits + C::format.mantissa_bits;
  const auto byte = std::to_integer<int>(bytes[1 + (bits <= 4 ? i / 2 : i)]);
  return bits <= 4 ? (byte >> (4 * (i % 2))) & 0xf : byte;
}

template <class C>
void every_code_decodes_to_its_value() {
  const minifloat_reference ref = reference_of<C>();
  const C c{8};
  const int sign = 1 << (C::format.exponent_bits + C::format.mantissa_bits);
  for (int k : {0, -127, 5, 100}) {
    for (int code = 0; code < ref.codes(); ++code) {
      if ((code & (sign - 1)) > C::format.largest) continue;  // beyond the largest: never written
      CAPTURE(code);
      CAPTURE(k);
      // A block of 8: the code at every position (nibble pairs included), under scale 2^k.
      std::vector<std::byte> bytes(c.encoded_bytes(8));
      bytes[0] = std::byte(static_cast<unsigned>(k + 127));
      for (std::size_t i = 1; i < bytes.size(); ++i)
        bytes[i] = std::byte(static_cast<unsigned>(bytes.size() == 5 ? code | code << 4 : code));
      std::vector<float> out(8);
      c.decode(bytes, out);
      const double expected = std::ldexp(ref.value(code), k);
      for (float v : out) CHECK(static_cast<double>(v) == expected);
      if (static_cast<double>(out[0]) == expected) CHECK(std::signbit(out[0]) == bool(code & sign));
    }
  }
}

// Blocks whose first element fixes the scale (the format's largest times
// 2^k), the rest random, ties between neighbouring codes, and values near
// and below the least subnormal: every code is the nearest, ties to even.
template <class C>
void encode_rounds_to_nearest_even() {
  const minifloat_reference ref = reference_of<C>();
  const int largest = C::format.largest;
  std::mt19937 gen(11);
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  const C c{32};
  for (int k : {0, -20, 7, -127}) {
    CAPTURE(k);
    const double top = std::ldexp(ref.value(largest), k);
    std::vector<float> x(32 * 40);
    for (std::size_t b = 0; b < 40; ++b) {
      float* block = x.data() + 32 * b;
      block[0] = static_cast<float>(b % 2 ? -top : top);
      for (std::size_t i = 1; i < 32; ++i) {
        const int code = static_cast<int>(gen() % static_cast<unsigned>(largest));
        switch ((b + i) % 4) {
          case 0: block[i] = static_cast<float>(top * uniform(gen)); break;
          case 1: block[i] = static_cast<float>(std::ldexp((ref.value(code) + ref.value(code + 1)) / 2, k)); break;
          case 2: block[i] = static_cast<float>(-std::ldexp(ref.value(code), k)); break;
          default: block[i] = static_cast<float>(std::ldexp(ref.value(1), k) * uniform(gen)); break;
        }
      }
    }
    const auto bytes = encoded(c, x);
    std::size_t wrong = 0;
    for (std::size_t b = 0; b < 40; ++b) {
      CHECK(std::to_integer<int>(bytes[b * (c.encoded_bytes(32))]) == k + 127);
      const std::vector<std::byte> block(bytes.begin() + static_cast<std::ptrdiff_t>(b * c.encoded_bytes(32)),
                                         bytes.begin() + static_cast<std::ptrdiff_t>((b + 1) * c.encoded_bytes(32)));
      for (std::size_t i = 0; i < 32; ++i) wrong += code_in<C>(block, i) != ref.nearest(x[32 * b + i], k, largest);
    }
    CHECK(wrong == 0);
  }
}

template <class C>
std::uint8_t scale_byte_for(std::vector<float> block) {
  return std::to_integer<std::uint8_t>(encoded(C{8}, block)[0]);
}

template <class C>
void scale_is_the_least_that_holds_the_block() {
  const float top = static_cast<float>(reference_of<C>().value(C::format.largest));
  const auto block = [](float largest) { return std::vector<float>{0.5f * largest, -largest, 0, 0, 0, 0, 0, 0}; };
  CHECK(scale_byte_for<C>(block(top)) == 127);                                 // k = 0
  CHECK(scale_byte_for<C>(block(std::ldexp(top, 9))) == 127 + 9);              // exactly the largest x 2^9
  CHECK(scale_byte_for<C>(block(std::nextafter(std::ldexp(top, 9), 1e38f))) == 127 + 10);
  CHECK(scale_byte_for<C>(block(std::ldexp(top, -100))) == 127 - 100);
  CHECK(scale_byte_for<C>(block(1e-44f)) == 0);                                // k clamped at -127
  CHECK(scale_byte_for<C>(std::vector<float>(8, 0.0f)) == 0);
  CHECK(scale_byte_for<C>(block(std::numeric_limits<float>::quiet_NaN())) == 255);
  CHECK(scale_byte_for<C>(block(std::numeric_limits<float>::infinity())) == 255);
  // Near float's largest, a code that rounds up past it decodes to the largest float, never inf.
  std::vector<float> big(8, std::numeric_limits<float>::max());
  big[1] = -std::numeric_limits<float>::max();
  const auto back = round_trip(C{8}, big);
  for (float v : back) CHECK(std::isfinite(v));
  CHECK(back[0] == std::numeric_limits<float>::max());
  CHECK(back[1] == -std::numeric_limits<float>::max());
}

}  // namespace

TEST_CASE("fp8 and fp4: every code decodes to the value its format defines") {
  every_code_decodes_to_its_value<codec::fp8_e4m3>();
  every_code_decodes_to_its_value<codec::fp8_e5m2>();
  every_code_decodes_to_its_value<codec::fp4_e2m1>();
  CHECK(reference_of<codec::fp8_e4m3>().value(codec::fp8_e4m3::format.largest) == 448.0);
  CHECK(reference_of<codec::fp8_e5m2>().value(codec::fp8_e5m2::format.largest) == 57344.0);
  CHECK(reference_of<codec::fp4_e2m1>().value(codec::fp4_e2m1::format.largest) == 6.0);
}

TEST_CASE("fp8 and fp4: each element rounds to the nearest code, ties to even, under the block's scale") {
  encode_rounds_to_nearest_even<codec::fp8_e4m3>();
  encode_rounds_to_nearest_even<codec::fp8_e5m2>();
  encode_rounds_to_nearest_even<codec::fp4_e2m1>();
}

TEST_CASE("fp8 and fp4: the scale is the least power of two that holds the block; NaN and inf poison it") {
  scale_is_the_least_that_holds_the_block<codec::fp8_e4m3>();
  scale_is_the_least_that_holds_the_block<codec::fp8_e5m2>();
  scale_is_the_least_that_holds_the_block<codec::fp4_e2m1>();
  // A NaN poisons its block only; a tensor of one element and the short last block keep their codes.
  std::vector<float> v(41, 1.5f);
  v[3] = std::numeric_limits<float>::quiet_NaN();
  const auto back = round_trip(codec::fp4_e2m1{8}, v);
  for (std::size_t i = 0; i < v.size(); ++i) CHECK((i < 8 ? std::isnan(back[i]) : back[i] == 1.5f));
  CHECK(round_trip(codec::fp4_e2m1{}, std::vector<float>{-3.0f}) == std::vector<float>{-3.0f});
  CHECK(round_trip(codec::fp8_e5m2{}, std::vector<float>{}).empty());
}

TEST_CASE("int8 and onebit: what they keep") {
  // int8: the block's largest magnitude is exact; zero blocks stay zero; NaN poisons its block only.
  std::vector<float> v(24, 0.0f);
  v[3] = -2.5f;
  v[4] = 1.0f;
  v[17] = std::numeric_limits<float>::quiet_NaN();
  const auto q = round_trip(codec::int8{8}, v);
  CHECK(q[3] == -2.5f);
  CHECK(q[0] == 0.0f);
  CHECK(std::isnan(q[16]));
  CHECK(std::isnan(q[23]));
  CHECK(q[8] == 0.0f);
  // onebit: each group's sum is kept.
  const auto r = random_values(256, 1.0f, 6);
  const auto d = round_trip(codec::onebit{}, r);
  double pos_in = 0, pos_out = 0, neg_in = 0, neg_out = 0;
  for (std::size_t i = 0; i < r.size(); ++i) {
    (r[i] >= 0 ? pos_in : neg_in) += r[i];
    (r[i] >= 0 ? pos_out : neg_out) += d[i];
    CHECK((d[i] >= 0) == (r[i] >= 0));
  }
  CHECK(pos_out == doctest::Approx(pos_in).epsilon(1e-5));
  CHECK(neg_out == doctest::Approx(neg_in).epsilon(1e-5));
}

TEST_CASE("error feedback: decoded outputs plus the final residual sum to the inputs") {
  const auto check_codec = [](auto inner) {
    codec::error_feedback feedback{inner};
    const std::size_t n = 1000;
    std::vector<double> inputs(n, 0.0), outputs(n, 0.0);
    std::vector<std::byte> bytes(inner.encoded_bytes(n));
    std::vector<float> decoded(n);
    for (int step = 0; step < 20; ++step) {
      const auto x = random_values(n, 1.0f, 100 + static_cast<unsigned>(step));
      feedback.encode(x, bytes);
      inner.decode(bytes, decoded);
      for (std::size_t i = 0; i < n; ++i) {
        inputs[i] += x[i];
        outputs[i] += decoded[i];
      }
    }
    const auto residual = feedback.residual();
    double worst = 0;
    for (std::size_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(outputs[i] + residual[i] - inputs[i]));
    CHECK(worst < 1e-4);  // 20 steps of float rounding on values of order 5
  };
  check_codec(codec::fp16{});
  check_codec(codec::int8{});
  check_codec(codec::onebit{});
  check_codec(codec::fp8_e4m3{});
  check_codec(codec::fp4_e2m1{});
  check_codec(codec::topk{0.05});
  check_codec(codec::randomk{0.05});
  codec::error_feedback feedback{codec::int8{}};
  std::vector<float> a(10), b(11);
  std::vector<std::byte> out_a(feedback.codec().encoded_bytes(10)), out_b(feedback.codec().encoded_bytes(11));
  feedback.encode(a, out_a);
  chorus_test::expect_error([&] { feedback.encode(b, out_b); }, chorus::errc::invalid_argument,
                            "one error_feedback per tensor");
}

TEST_CASE("codec concept") {
  static_assert(codec::codec<codec::identity>);
  static_assert(codec::codec<codec::fp16>);
  static_assert(codec::codec<codec::bf16>);
  static_assert(codec::codec<codec::int8>);
  static_assert(codec::codec<codec::onebit>);
  static_assert(codec::codec<codec::topk> && codec::sparse<codec::topk> && !codec::sparse_indices_agree<codec::topk>);
  static_assert(codec::codec<codec::randomk> && codec::sparse<codec::randomk> &&
                codec::sparse_indices_agree<codec::randomk>);
  static_assert(!codec::sparse<codec::int8>);
  static_assert(!codec::codec<codec::error_feedback<codec::int8>>);
  static_assert(codec::codec_or_feedback<codec::error_feedback<codec::int8>&>);
  static_assert(!codec::codec_or_feedback<chorus::algorithm>);
}

TEST_CASE("any_codec: visit hands over the codec as it was made, its block included") {
  const codec::any_codec wire(codec::int8{64});
  const std::size_t visited = codec::visit(wire, [](const auto& c) { return c.encoded_bytes(1000); });
  CHECK(visited == codec::int8{64}.encoded_bytes(1000));
  CHECK(visited == wire.encoded_bytes(1000));
  CHECK(visited != codec::int8{}.encoded_bytes(1000));
  CHECK(wire.as<codec::int8>() != nullptr);
  CHECK(wire.as<codec::fp16>() == nullptr);
  CHECK(codec::any_codec().as<codec::identity>() == nullptr);  // no codec is not identity
  chorus_test::expect_error([] { codec::visit(codec::any_codec(), [](const auto&) { return 0; }); },
                            chorus::errc::invalid_argument, "no codec of type 'none'");
}

namespace {

// The k largest magnitudes by a full sort (ties: the lower index first): the
// reference top-k is checked against.
std::vector<std::size_t> largest_by_sort(const std::vector<float>& values, std::size_t k) {
  std::vector<std::size_t> order(values.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return std::fabs(values[a]) > std::fabs(values[b]); });
  order.resize(k);
  std::sort(order.begin(), order.end());
  return order;
}

std::vector<std::size_t> nonzero_positions(const std::vector<float>& decoded) {
  std::vector<std::size_t> at;
  for (std::size_t i = 0; i < decoded.size(); ++i)
    if (decoded[i] != 0.0f) at.push_back(i);
  return at;
}

}  // namespace

TEST_CASE("sparse codecs: sizes, and the ratio checked") {
  CHECK(codec::topk{0.01}.kept(0) == 0);
  CHECK(codec::topk{0.01}.kept(1) == 1);    // at least one of a non-empty tensor
  CHECK(codec::topk{0.01}.kept(300) == 3);  // 0.01 * 300 is 3.0000000000000004 in double
  CHECK(codec::topk{0.01}.kept(301) == 4);
  CHECK(codec::topk{1.0}.kept(7) == 7);
  CHECK(codec::topk{0.01}.encoded_bytes(1000) == 10 * 8);
  CHECK(codec::topk{0.01}.encoded_bytes(0) == 0);
  CHECK(codec::randomk{0.01}.encoded_bytes(1000) == 8 + 10 * 4);
  CHECK(codec::randomk{0.5}.encoded_bytes(1) == 8 + 4);
  CHECK(codec::randomk{0.5}.encoded_bytes(0) == 0);
  for (double bad : {0.0, -0.5, 1.5, std::nan("")}) {
    CAPTURE(bad);
    chorus_test::expect_error([&] { codec::topk c(bad); }, chorus::errc::invalid_argument, "must be in (0, 1]");
    chorus_test::expect_error([&] { codec::randomk c(bad); }, chorus::errc::invalid_argument, "must be in (0, 1]");
  }
}

TEST_CASE("topk keeps exactly the k largest magnitudes, indices ascending, ties by index, NaN first") {
  for (std::size_t n : {1u, 2u, 9u, 256u, 4099u}) {
    for (double ratio : {0.01, 0.1, 0.5, 1.0}) {
      CAPTURE(n);
      CAPTURE(ratio);
      const codec::topk c{ratio};
      const auto values = random_values(n, 2.0f, static_cast<unsigned>(n));
      const auto decoded = round_trip(c, values);
      const auto kept = largest_by_sort(values, c.kept(n));
      CHECK(nonzero_positions(decoded) == kept);
      for (std::size_t i : kept) CHECK(decoded[i] == values[i]);
      const auto bytes = encoded(c, values);  // indices first, ascending
      for (std::size_t j = 0; j < kept.size(); ++j) {
        std::uint32_t index;
        std::memcpy(&index, bytes.data() + 4 * j, 4);
        CHECK(index == kept[j]);
      }
    }
  }
  // Large tensors select among the candidates a sample leaves; inputs whose
  // sampled elements (every 24th here) mislead it, both ways.
  for (double ratio : {0.01, 0.5}) {
    CAPTURE(ratio);
    const std::size_t n = 100000;
    auto spiky = random_values(n, 1.0f, 21), hollow = spiky;
    for (std::size_t i = 0; i < n; i += n / 4096) {
      spiky[i] = 1000.0f + static_cast<float>(i);
      hollow[i] = 0.0f;
    }
    for (const auto& values : {spiky, hollow, random_values(n, 1.0f, 22)}) {
      const codec::topk c{ratio};
      const auto decoded = round_trip(c, values);
      CHECK(nonzero_positions(decoded) == largest_by_sort(values, c.kept(n)));
    }
  }
  // Ties: of eight equal magnitudes, the first three by index.
  const std::vector<float> ties{1.0f, -1.0f, 1.0f, 0.5f, -1.0f, 1.0f, 1.0f, -1.0f, 1.0f, 0.25f};
  CHECK(nonzero_positions(round_trip(codec::topk{0.3}, ties)) == std::vector<std::size_t>{0, 1, 2});
  // A NaN is sent, not left in a residual.
  std::vector<float> with_nan(100, 1.0f);
  with_nan[42] = std::numeric_limits<float>::quiet_NaN();
  with_nan[7] = 1e30f;
  const auto got = round_trip(codec::topk{0.02}, with_nan);
  CHECK(std::isnan(got[42]));
  CHECK(got[7] == 1e30f);
  CHECK(got[0] == 0.0f);
}

TEST_CASE("topk decode_add adds the kept values; damaged indices are an error, not a stray write") {
  const codec::topk c{0.1};
  const auto values = random_values(50, 1.0f, 11);
  auto bytes = encoded(c, values);
  std::vector<float> acc(50, 1.0f);
  c.decode_add(bytes, acc);
  const auto decoded = round_trip(c, values);
  for (std::size_t i = 0; i < 50; ++i) CHECK(acc[i] == 1.0f + decoded[i]);
  const std::uint32_t outside = 50;
  std::memcpy(bytes.data() + 4, &outside, 4);
  std::vector<float> out(50);
  chorus_test::expect_error([&] { c.decode(bytes, out); }, chorus::errc::invalid_argument,
                            "index 50 is outside a 50-element tensor");
}

TEST_CASE("randomk: one index per stratum, the same on every rank for the same call, from the bytes alone") {
  const std::size_t n = 1000;
  const auto values = random_values(n, 1.0f, 12);
  codec::randomk a{0.03, 77}, b{0.03, 77}, other_seed{0.03, 78};
  const std::size_t k = a.kept(n);
  REQUIRE(k == 30);
  std::vector<std::vector<std::size_t>> picked;
  for (int call = 0; call < 3; ++call) {
    const auto from_a = encoded(a, values), from_b = encoded(b, values);
    CHECK(same_bytes(from_a.data(), from_b.data(), from_a.size()));  // same seed, same call: same bytes
    const codec::randomk fresh{0.03, 1};                             // decoding needs only the bytes
    std::vector<float> decoded(n);
    fresh.decode(from_a, decoded);
    std::vector<std::size_t> at = nonzero_positions(decoded);
    REQUIRE(at.size() == k);
    for (std::size_t j = 0; j < k; ++j) {
      CHECK(at[j] >= j * n / k);  // the j-th stratum [j n / k, (j+1) n / k)
      CHECK(at[j] < (j + 1) * n / k);
      CHECK(decoded[at[j]] == values[at[j]]);
    }
    picked.push_back(at);
    const auto from_other = encoded(other_seed, values);
    CHECK(codec::randomk::key_of(from_other) != codec::randomk::key_of(from_a));
  }
  CHECK(picked[0] != picked[1]);  // a new draw every call
  CHECK(picked[1] != picked[2]);
  CHECK(a.calls() == 3);
  codec::randomk copy = a;  // copies share the count: passing by value moves the original on
  (void)encoded(copy, values);
  CHECK(a.calls() == 4);
  // Over many calls every element is drawn about k/n of the time.
  std::vector<int> drawn(n, 0);
  codec::randomk counter{0.03, 5};
  std::vector<float> ones(n, 1.0f), decoded(n);
  for (int call = 0; call < 2000; ++call) {
    counter.decode(encoded(counter, ones), decoded);
    for (std::size_t i = 0; i < n; ++i) drawn[i] += decoded[i] != 0.0f;
  }
  const auto [fewest, most] = std::minmax_element(drawn.begin(), drawn.end());
  CHECK(*fewest > 25);  // expected 2000 * 0.03 = 60 per element (strata of 33 or 34)
  CHECK(*most < 110);
}

TEST_CASE("any_codec by name: topk:R and randomk:R[:SEED]") {
  const codec::any_codec top = codec::by_name("topk:0.05");
  REQUIRE(top.as<codec::topk>() != nullptr);
  CHECK(top.as<codec::topk>()->ratio() == 0.05);
  CHECK(top.encoded_bytes(1000) == 50 * 8);
  CHECK(codec::by_name("topk").as<codec::topk>()->ratio() == 0.01);
  const codec::any_codec random = codec::by_name("randomk:0.25:42");
  REQUIRE(random.as<codec::randomk>() != nullptr);
  CHECK(random.as<codec::randomk>()->seed() == 42);
  CHECK(random.as<codec::randomk>()->ratio() == 0.25);
  CHECK(codec::visit(random, [](const auto& c) { return std::string(c.name); }) == "randomk");
  chorus_test::expect_error([] { codec::by_name("topk:0"); }, chorus::errc::invalid_argument, "(0, 1]");
  chorus_test::expect_error([] { codec::by_name("topk:lots"); }, chorus::errc::invalid_argument,
                            "'lots' is not a ratio");
  chorus_test::expect_error([] { codec::by_name("topk:0.1:3"); }, chorus::errc::invalid_argument, "a ratio only");
  chorus_test::expect_error([] { codec::by_name("randomk:0.1:x"); }, chorus::errc::invalid_argument, "not a seed");
  chorus_test::expect_error([] { codec::by_name("top"); }, chorus::errc::invalid_argument,
                            "(none, identity, fp16, bf16, int8, fp8_e4m3, fp8_e5m2, fp4_e2m1, onebit, topk[:R], "
                            "randomk[:R[:SEED]])");
  chorus_test::expect_error([] { codec::by_name("fp16:3"); }, chorus::errc::invalid_argument, "fp16 takes no settings");
}

// Every codec of the list is reachable by its name, visits as its own type,
// feeds back errors, and is described (codec_spec) exactly when it has
// device kernels; the list's names are what the errors and help print.
TEST_CASE("the codec list: by_name, visit, error feedback and specs for every codec in it") {
  std::size_t listed = 0;
  codec::codecs::for_each([&]<class C>() {
    ++listed;
    const std::string name(C::name);
    CAPTURE(name);
    const codec::any_codec made = codec::by_name(name);
    CHECK(made.name() == name);
    CHECK(made.as<C>() != nullptr);
    CHECK(codec::visit(made, [](const auto& c) { return std::string(c.name); }) == name);
    CHECK(made.sparse() == codec::sparse<C>);
    codec::any_error_feedback feedback(made);
    CHECK(static_cast<bool>(feedback));
    CHECK(feedback.visit([](const auto& state) { return std::string(state.codec().name); }) == name);
    CHECK(codec::codec_names().find(name) != std::string::npos);
    if constexpr (codec::describable<C>) {
      const chorus::codec_spec spec = codec::spec_of(C{});
      bool same = false;
      CHECK(codec::visit_spec(spec, [&](const auto& c) { same = std::string(c.name) == name; }));
      CHECK(same);
      CHECK(codec::codec_names(true).find(name) != std::string::npos);
    } else {
      CHECK(codec::codec_names(true).find(name) == std::string::npos);
    }
  });
  CHECK(listed == 10);
  CHECK(codec::codec_names(true) == "fp16, bf16, int8, fp8_e4m3, fp8_e5m2, fp4_e2m1, onebit");
  CHECK(!codec::visit_spec({"topk", 1, true}, [](const auto&) {}));
}
