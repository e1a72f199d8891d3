// The shared body of the fp16 and bf16 codecs: 2 bytes per element, little
// endian, converted 8 at a time by a Format's vector kernels or one at a time
// by its scalar functions (which give the same bits).
//
// Overflow policy (overflow::saturate, the default): a finite value beyond the
// format's largest finite value is encoded as that value with its sign;
// overflow::infinity follows IEEE and encodes it as infinity. Either way inf
// stays inf and NaN stays NaN (quiet), so a diverged gradient is never hidden.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/codec/elements.hpp>
#include <chorus/codec/simd_kernels.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace chorus::codec {

namespace detail {

// Format: static scalar encode(float, overflow) -> uint16, decode(uint16) -> float
// (codec/elements.hpp, shared with the device kernels),
// and under CHORUS_CODEC_X86 encode16<overflow>(const float*, uint16*),
// encode8<overflow>(const float*, uint16*) and decode8(const uint16*) -> __m256.
template <class Format>
class two_byte_float {
 public:
  static constexpr bool device_kernels = true;  // cuda/kernels.cuh has them: a codec_spec names it (spec.hpp)
  explicit two_byte_float(overflow policy = overflow::saturate, simd_path path = best_path())
      : policy_(policy), path_(runnable(path)) {}

  std::size_t encoded_bytes(std::size_t n) const { return 2 * n; }
  std::size_t granule() const { return 1; }
  overflow policy() const { return policy_; }
  simd_path path() const { return path_; }

  void encode(std::span<const float> in, std::span<std::byte> out) const {
    require_sizes(Format::name, "encode", in.size(), encoded_bytes(in.size()), out.size());
    auto* bits = reinterpret_cast<std::uint16_t*>(out.data());
    std::size_t i = 0;
#if CHORUS_CODEC_X86
    if (path_ == simd_path::avx2)
      i = policy_ == overflow::saturate ? encode_avx2<overflow::saturate>(in.data(), bits, in.size())
                                        : encode_avx2<overflow::infinity>(in.data(), bits, in.size());
#endif
    for (; i < in.size(); ++i) bits[i] = Format::encode(in[i], policy_);
  }

  void decode(std::span<const std::byte> in, std::span<float> out) const { convert<false>(in, out, "decode"); }
  void decode_add(std::span<const std::byte> in, std::span<float> acc) const { convert<true>(in, acc, "decode_add"); }

  // |decode(encode(x)) - x| <= half an ulp of the format at x (relative
  // 2^-(mantissa bits + 1)), half the smallest subnormal below the normal
  // range, and x - largest for saturated overflow.
  void error_bound(std::span<const float> in, std::span<float> bound) const {
    for (std::size_t i = 0; i < in.size(); ++i) bound[i] = Format::bound(in[i], policy_);
  }

 private:
  template <bool Accumulate>
  void convert(std::span<const std::byte> in, std::span<float> out, const char* operation) const {
    require_sizes(Format::name, operation, out.size(), encoded_bytes(out.size()), in.size());
    const auto* bits = reinterpret_cast<const std::uint16_t*>(in.data());
    std::size_t i = 0;
#if CHORUS_CODEC_X86
    if (path_ == simd_path::avx2) i = convert_avx2<Accumulate>(bits, out.data(), out.size());
#endif
    convert_portable<Accumulate>(bits, out.data(), i, out.size());
  }

  template <bool Accumulate>
  CHORUS_NO_FMA_CONTRACT static void convert_portable(const std::uint16_t* bits, float* out, std::size_t i,
                                                      std::size_t n) {
    CHORUS_NO_FMA_CONTRACT_BODY
    for (; i < n; ++i) element::decoded_into<Accumulate>(out[i], Format::decode(bits[i]));
  }

#if CHORUS_CODEC_X86
  template <overflow Policy>
  CHORUS_TARGET_AVX2 static std::size_t encode_avx2(const float* in, std::uint16_t* out, std::size_t n) {
    std::size_t i = 0;
    for (; i + 16 <= n; i += 16) Format::template encode16<Policy>(in + i, out + i);
    for (; i + 8 <= n; i += 8) Format::template encode8<Policy>(in + i, out + i);
    return i;
  }

  template <bool Accumulate>
  CHORUS_TARGET_AVX2 static std::size_t convert_avx2(const std::uint16_t* in, float* out, std::size_t n) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      __m256 values = Format::decode8(in + i);
      if constexpr (Accumulate) values = _mm256_add_ps(_mm256_loadu_ps(out + i), values);
      _mm256_storeu_ps(out + i, values);
    }
    return i;
  }
#endif

  overflow policy_;
  simd_path path_;
};

}  // namespace detail

}  // namespace chorus::codec
