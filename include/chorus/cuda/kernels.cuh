// Device kernels for every reduction op and element type, and for every
// codec with device kernels (fp16, bf16, int8, fp8_e4m3, fp8_e5m2, fp4_e2m1,
// onebit: encode, decode, decode_add, and the error feedback update), on
// the caller's stream.
//
//   #include <chorus/cuda/kernels.cuh>               // in a file nvcc compiles
//   chorus::cuda::kernels::reduce_into(acc, incoming, n, chorus::op::sum{}, false, stream);
//   chorus::cuda::kernels::encode(chorus::codec::int8{}, grads, wire, n, stream);
//
// Header-only, compiled by the user's nvcc (not NVRTC): a CUDA user includes
// this file and the kernels are instantiated for exactly the types and ops
// the program uses; a trainer compiled with g++ alone never needs them (the
// staged path reduces on the host) and never includes this file.
//
// Bits: every element is computed by the functions the CPU code also uses
// (core/reduce_op.hpp, core/half.hpp, codec/elements.hpp), in the CPU's
// order where order matters (onebit's 8 lane sums are added one element at a
// time by one thread each); the block maxima of int8 do not depend on order.
// So a kernel's output equals the CPU's bit for bit (tests/gpu/ checks it on
// a GPU). Products, sums and quotients are the explicitly rounded
// intrinsics, which nvcc never fuses; build with nvcc's default IEEE
// settings (not -use_fast_math or --ftz=true, which flush subnormals).
//
// Cost: each kernel reads and writes its bytes once (onebit and int8 encode
// read a block once per warp); memory bound, so the target is the
// device-to-device copy bandwidth (bench/gpu_kernels.cu measures both).
// Reaching it takes bytes in flight: about bandwidth x latency, spread
// over the threads resident at once. One 4-byte load per thread falls short
// of that (docs/gpu.md has what the first kernels reached), so every thread
// reads all its `per_thread` elements before it writes any (an element
// step's value() only reads, its write() only writes: the compiler may not
// move a load above a store it cannot prove apart), and the block codecs'
// lanes read `per_thread` elements at a time the same way.
// Every call returns once the work is enqueued; it is visible to later work
// on `stream`. Launch errors throw chorus::error.
#pragma once

#if !defined(__CUDACC__)
#error "chorus/cuda/kernels.cuh holds device kernels: include it from a file that nvcc compiles"
#endif

#include <chorus/codec/bf16.hpp>
#include <chorus/codec/elements.hpp>
#include <chorus/codec/fp16.hpp>
#include <chorus/codec/int8.hpp>
#include <chorus/codec/minifloat.hpp>
#include <chorus/codec/onebit.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/cuda/device_compute.hpp>
#include <chorus/cuda/runtime.hpp>

#include <cuda_runtime.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <type_traits>

namespace chorus::cuda::kernels {

namespace detail {

inline constexpr int threads_per_block = 256;
inline constexpr int warp = 32;
inline constexpr std::size_t per_thread = 4;       // elements a thread reads before it writes (see Cost)
inline constexpr std::size_t most_blocks = 65535;  // grid-stride loops cover the rest

inline unsigned grid_for(std::size_t items, std::size_t per_block) {
  return static_cast<unsigned>(std::min(most_blocks, (items + per_block - 1) / per_block));
}

inline void launched(const char* what) { chorus::cuda::detail::check(cudaGetLastError(), what); }

// One turn of a thread: indices first, first + step, ... (per_thread of
// them, those below end), every value read (read(i)) before any is used
// (use(i, value)): see Cost.
template <class Read, class Use>
CHORUS_HD void one_turn(std::size_t first, std::size_t step, std::size_t end, const Read& read, const Use& use) {
  decltype(read(first)) values[per_thread];
  for (std::size_t k = 0; k < per_thread; ++k)
    if (const std::size_t i = first + k * step; i < end) values[k] = read(i);
  for (std::size_t k = 0; k < per_thread; ++k)
    if (const std::size_t i = first + k * step; i < end) use(i, values[k]);
}

// An element step's turn. An element step is
//   CHORUS_HD V value(std::size_t i) const;        // reads only: what element i becomes
//   CHORUS_HD void write(std::size_t i, V) const;  // writes only
template <class F>
CHORUS_HD void each_of_tile(const F& f, std::size_t first, std::size_t step, std::size_t n) {
  one_turn(first, step, n, [&](std::size_t i) { return f.value(i); }, [&](std::size_t i, auto v) { f.write(i, v); });
}

// Every element of [0, n), a tile of per_thread x blockDim elements per
// block and turn (coalesced: thread t takes t, t + blockDim, ...), by a
// grid-stride loop over tiles.
template <class F>
__global__ void each_element(std::size_t n, F f) {
  const std::size_t tile = static_cast<std::size_t>(blockDim.x) * per_thread;
  for (std::size_t first = blockIdx.x * tile; first < n; first += tile * gridDim.x)
    each_of_tile(f, first + threadIdx.x, blockDim.x, n);
}

// f(block, lane) for every codec block, one warp per block.
template <class F>
__global__ void each_codec_block(std::size_t blocks, F f) {
  const std::size_t warps_per_block = blockDim.x / warp;
  const std::size_t stride = warps_per_block * gridDim.x;
  const unsigned lane = threadIdx.x % warp;
  for (std::size_t b = blockIdx.x * warps_per_block + threadIdx.x / warp; b < blocks; b += stride) f(b, lane);
}

}  // namespace detail

// Where the kernels' work runs: on a stream of the GPU (what every public
// call uses), or serially on the calling host thread over host memory, the
// same functions one element or one codec block at a time, warp steps
// included (tests/cuda/ runs every kernel this way on machines without a GPU).
struct on_stream {
  cudaStream_t stream = nullptr;

  template <class F>
  void elements(std::size_t n, const F& f, const char* what) const {
    if (n == 0) return;
    constexpr int threads = detail::threads_per_block;
    detail::each_element<<<detail::grid_for(n, threads * detail::per_thread), threads, 0, stream>>>(n, f);
    detail::launched(what);
  }
  template <class F>
  void codec_blocks(std::size_t blocks, const F& f, const char* what) const {
    if (blocks == 0) return;
    const std::size_t warps_per_block = detail::threads_per_block / detail::warp;
    detail::each_codec_block<<<detail::grid_for(blocks, warps_per_block), detail::threads_per_block, 0, stream>>>(
        blocks, f);
    detail::launched(what);
  }
};

struct on_host_thread {
  // The device's tiles, one thread after another.
  template <class F>
  void elements(std::size_t n, const F& f, const char*) const {
    const std::size_t threads = detail::threads_per_block, tile = threads * detail::per_thread;
    for (std::size_t first = 0; first < n; first += tile)
      for (std::size_t t = 0; t < threads; ++t) detail::each_of_tile(f, first + t, threads, n);
  }
  template <class F>
  void codec_blocks(std::size_t blocks, const F& f, const char*) const {
    for (std::size_t b = 0; b < blocks; ++b) f.serial(b);
  }
};

namespace detail {

// Unaligned float header fields, as the CPU codecs write them (memcpy).
CHORUS_HD inline float load_float(const std::byte* at) {
  float value;
  __builtin_memcpy(&value, at, sizeof value);
  return value;
}
CHORUS_HD inline void store_float(std::byte* at, float value) { __builtin_memcpy(at, &value, sizeof value); }

// Where block b of a block codec starts, and how many elements it holds.
struct block_geometry {
  std::size_t block, full_bytes, header_bytes, n;
  CHORUS_HD std::size_t first(std::size_t b) const { return b * block; }
  CHORUS_HD std::size_t count(std::size_t b) const { return n - first(b) < block ? n - first(b) : block; }
  CHORUS_HD std::size_t byte(std::size_t b) const { return b * full_bytes; }
  CHORUS_HD std::size_t blocks() const { return (n + block - 1) / block; }
};

template <class Payload>
block_geometry geometry_of(std::size_t block, std::size_t n) {
  return {block, Payload::header_bytes + Payload::payload_bytes(block), Payload::header_bytes, n};
}

// --- reductions --------------------------------------------------------------

template <class A, class Op>
struct reduce_step {
  A* accumulate;
  const A* incoming;
  Op op;
  bool incoming_is_lower;
  CHORUS_HD A value(std::size_t i) const {
    return incoming_is_lower ? op(incoming[i], accumulate[i]) : op(accumulate[i], incoming[i]);
  }
  CHORUS_HD void write(std::size_t i, A v) const { accumulate[i] = v; }
};

template <class A, class Op>
struct finalize_step {
  A* values;
  Op op;
  std::size_t contributions;
  CHORUS_HD A value(std::size_t i) const { return op.finalize(values[i], contributions); }
  CHORUS_HD void write(std::size_t i, A v) const { values[i] = v; }
};

template <class To, class From>
struct convert_step {
  To* to;
  const From* from;
  CHORUS_HD To value(std::size_t i) const { return static_cast<To>(from[i]); }
  CHORUS_HD void write(std::size_t i, To v) const { to[i] = v; }
};

// --- the compressed collectives' scaling -----------------------------------------

struct multiply_step {
  const float* in;
  float* out;
  float factor;
  CHORUS_HD float value(std::size_t i) const { return hd::multiply(in[i], factor); }
  CHORUS_HD void write(std::size_t i, float v) const { out[i] = v; }
};

struct divide_step {
  float* values;
  float divisor;
  CHORUS_HD float value(std::size_t i) const { return hd::divide(values[i], divisor); }
  CHORUS_HD void write(std::size_t i, float v) const { values[i] = v; }
};

struct zero_step {
  float* values;
  CHORUS_HD float value(std::size_t) const { return 0.0f; }
  CHORUS_HD void write(std::size_t i, float v) const { values[i] = v; }
};

// --- the window's weighted sums, in double ---------------------------------------

struct weigh_step {
  double* sum;
  const float* in;
  double weight;
  bool first;
  CHORUS_HD double value(std::size_t i) const {
    const double term = hd::multiply(weight, static_cast<double>(in[i]));
    return first ? term : hd::add(sum[i], term);
  }
  CHORUS_HD void write(std::size_t i, double v) const { sum[i] = v; }
};

// --- decoding -------------------------------------------------------------------

// What out[i] becomes when a decoded value arrives: the value, or (decode_add)
// out[i] plus it, as the CPU codecs compute it.
template <bool Accumulate>
CHORUS_HD float decoded(const float* out, std::size_t i, float value) {
  float result = 0.0f;
  if constexpr (Accumulate) result = out[i];
  codec::element::decoded_into<Accumulate>(result, value);
  return result;
}

// --- fp16 and bf16 -------------------------------------------------------------

template <class Codec>
struct two_byte;
template <>
struct two_byte<codec::fp16> {
  CHORUS_HD static std::uint16_t encode(float x, codec::overflow p) { return codec::element::fp16_encode(x, p); }
  CHORUS_HD static float decode(std::uint16_t bits) { return codec::element::fp16_decode(bits); }
};
template <>
struct two_byte<codec::bf16> {
  CHORUS_HD static std::uint16_t encode(float x, codec::overflow p) { return codec::element::bf16_encode(x, p); }
  CHORUS_HD static float decode(std::uint16_t bits) { return codec::element::bf16_decode(bits); }
};

template <class Codec>
struct two_byte_encode {
  const float* in;
  std::uint16_t* out;
  codec::overflow policy;
  CHORUS_HD std::uint16_t value(std::size_t i) const { return two_byte<Codec>::encode(in[i], policy); }
  CHORUS_HD void write(std::size_t i, std::uint16_t v) const { out[i] = v; }
};

template <class Codec, bool Accumulate>
struct two_byte_decode {
  const std::uint16_t* in;
  float* out;
  CHORUS_HD float value(std::size_t i) const { return decoded<Accumulate>(out, i, two_byte<Codec>::decode(in[i])); }
  CHORUS_HD void write(std::size_t i, float v) const { out[i] = v; }
};

// --- int8 --------------------------------------------------------------------------

// f(k, x[k]) for k = first, first + step, ... below count, in order of k,
// a turn of per_thread at a time.
template <class F>
CHORUS_HD void each_strided(const float* x, std::size_t first, std::size_t step, std::size_t count, const F& f) {
  for (std::size_t base = first; base < count; base += per_thread * step)
    one_turn(base, step, count, [&](std::size_t k) { return x[k]; }, f);
}

__device__ inline float warp_largest(float value) {
  for (int offset = warp / 2; offset > 0; offset /= 2)
    value = hd::larger(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}

// The scaled block codecs (int8, fp8, fp4): a warp per block, each lane's
// largest magnitude, the warp's maximum (exact in any order), then
// Derived::write(b, lane, largest) writes the block's scale and codes.
template <class Derived>
struct by_block_largest {
  block_geometry at;
  const float* in;
  std::byte* out;

  CHORUS_HD float lane_largest(std::size_t b, unsigned lane) const {
    float largest = 0.0f;
    each_strided(in + at.first(b), lane, warp, at.count(b),
                 [&](std::size_t, float x) { largest = hd::larger(largest, codec::element::int8_magnitude(x)); });
    return largest;
  }
  __device__ void operator()(std::size_t b, unsigned lane) const {
    self().write(b, lane, warp_largest(lane_largest(b, lane)));
  }
  void serial(std::size_t b) const {
    float largest = 0.0f;
    for (unsigned lane = 0; lane < warp; ++lane) largest = hd::larger(largest, lane_largest(b, lane));
    for (unsigned lane = 0; lane < warp; ++lane) self().write(b, lane, largest);
  }

 private:
  CHORUS_HD const Derived& self() const { return static_cast<const Derived&>(*this); }
};

struct int8_encode : by_block_largest<int8_encode> {
  CHORUS_HD void write(std::size_t b, unsigned lane, float block_largest) const {
    const codec::element::int8_scale s = codec::element::int8_scale_of(block_largest);
    std::byte* block = out + at.byte(b);
    if (lane == 0) store_float(block, s.scale);
    auto* q = reinterpret_cast<std::int8_t*>(block + at.header_bytes);
    each_strided(in + at.first(b), lane, warp, at.count(b),
                 [&](std::size_t k, float x) { q[k] = codec::element::int8_quantize(x, s); });
  }
};

// --- fp8 and fp4 ---------------------------------------------------------------------

// As int8: a warp per block, the block's largest magnitude, then its scale
// byte (lane 0) and each lane's codes; fp4's lanes write whole bytes (two
// elements each), so no two lanes write one byte.
template <class Codec>
struct minifloat_encode : by_block_largest<minifloat_encode<Codec>> {
  static constexpr codec::element::minifloat_format format = Codec::format;
  static constexpr bool nibbles = codec::detail::code_bits<format> == 4;

  CHORUS_HD void write(std::size_t b, unsigned lane, float block_largest) const {
    const std::uint8_t scale = codec::element::minifloat_scale_byte(block_largest, format);
    std::byte* block = this->out + this->at.byte(b);
    if (lane == 0) block[0] = std::byte{scale};
    auto* codes = reinterpret_cast<std::uint8_t*>(block + this->at.header_bytes);
    const float* x = this->in + this->at.first(b);
    const std::size_t count = this->at.count(b);
    if constexpr (nibbles) {
      for (std::size_t j = lane; 2 * j < count; j += warp) {
        const float low = x[2 * j], high = 2 * j + 1 < count ? x[2 * j + 1] : 0.0f;
        codes[j] = static_cast<std::uint8_t>(
            codec::element::minifloat_encode(low, scale, format) |
            (2 * j + 1 < count ? codec::element::minifloat_encode(high, scale, format) << 4 : 0));
      }
    } else {
      each_strided(x, lane, warp, count,
                   [&](std::size_t k, float v) { codes[k] = codec::element::minifloat_encode(v, scale, format); });
    }
  }
};

template <class Codec>
inline constexpr bool is_minifloat = requires { Codec::format; };

// --- onebit ------------------------------------------------------------------------

// A warp per block. Lanes 0-7 sum the non-negative group's lane j = lane,
// lanes 8-15 the negative group's, each one element at a time in the CPU's
// order; the signs go 32 at a time through a ballot, whose bit k is
// element base + k's, written by lanes 0-3 a byte each.
struct onebit_encode {
  static constexpr std::size_t lanes = codec::element::onebit_lanes;
  block_geometry at;
  const float* in;
  std::byte* out;

  CHORUS_HD float lane_sum(std::size_t b, unsigned lane) const {
    float sum = 0.0f;
    if (lane >= 2 * lanes) return sum;
    const bool positive_group = lane < lanes;
    each_strided(in + at.first(b), lane % lanes, lanes, at.count(b), [&](std::size_t, float x) {
      sum = hd::add(sum, codec::element::onebit_positive(x) == positive_group ? x : 0.0f);
    });
    return sum;
  }
  CHORUS_HD bool positive(std::size_t b, std::size_t k) const {
    return k < at.count(b) && codec::element::onebit_positive(in[at.first(b) + k]);
  }
  CHORUS_HD void write_signs(std::size_t b, std::size_t base, unsigned lane, std::uint32_t mask) const {
    auto* signs = reinterpret_cast<std::uint8_t*>(out + at.byte(b) + at.header_bytes);
    const std::size_t byte = base / 8 + lane;
    if (lane < 4 && byte < (at.count(b) + 7) / 8) signs[byte] = static_cast<std::uint8_t>(mask >> (8 * lane));
  }
  // sums: the 8 non-negative lanes, then the 8 negative ones.
  CHORUS_HD void write_means(std::size_t b, const float* sums, std::size_t positives) const {
    std::byte* block = out + at.byte(b);
    store_float(block, codec::element::onebit_mean(sums, positives));
    store_float(block + sizeof(float), codec::element::onebit_mean(sums + lanes, at.count(b) - positives));
  }

  __device__ void operator()(std::size_t b, unsigned lane) const {
    const float sum = lane_sum(b, lane);
    std::size_t positives = 0;
    for (std::size_t base = 0; base < at.count(b); base += per_thread * warp) {
      bool signs[per_thread];  // all read before the first ballot (see Cost)
      for (std::size_t j = 0; j < per_thread; ++j) signs[j] = positive(b, base + j * warp + lane);
      for (std::size_t j = 0; j < per_thread && base + j * warp < at.count(b); ++j) {  // the same turns in every lane
        const std::uint32_t mask = __ballot_sync(0xffffffffu, signs[j]);
        positives += static_cast<std::size_t>(__popc(mask));
        write_signs(b, base + j * warp, lane, mask);
      }
    }
    float sums[2 * lanes];
    for (unsigned j = 0; j < 2 * lanes; ++j) sums[j] = __shfl_sync(0xffffffffu, sum, static_cast<int>(j));
    if (lane == 0) write_means(b, sums, positives);
  }
  void serial(std::size_t b) const {
    float sums[2 * lanes];
    for (unsigned j = 0; j < 2 * lanes; ++j) sums[j] = lane_sum(b, j);
    std::size_t positives = 0;
    for (std::size_t base = 0; base < at.count(b); base += warp) {
      std::uint32_t mask = 0;
      for (unsigned lane = 0; lane < warp; ++lane) mask |= positive(b, base + lane) ? 1u << lane : 0u;
      positives += static_cast<std::size_t>(std::popcount(mask));
      for (unsigned lane = 0; lane < warp; ++lane) write_signs(b, base, lane, mask);
    }
    write_means(b, sums, positives);
  }
};

// --- decoding a block codec --------------------------------------------------------

// Element k of a block, from the block's first byte (its header).
struct int8_value {
  CHORUS_HD static float of(const std::byte* block, std::size_t header_bytes, std::size_t k) {
    const auto q = static_cast<std::int8_t>(block[header_bytes + k]);
    return codec::element::int8_dequantize(q, load_float(block));
  }
};
template <codec::element::minifloat_format F>
struct minifloat_value {
  CHORUS_HD static float of(const std::byte* block, std::size_t header_bytes, std::size_t k) {
    const auto* codes = reinterpret_cast<const std::uint8_t*>(block + header_bytes);
    const std::uint32_t code = codec::detail::code_bits<F> == 4 ? (codes[k / 2] >> (4 * (k % 2))) & 0xfu : codes[k];
    return codec::element::minifloat_decode(code, static_cast<std::uint8_t>(block[0]), F);
  }
};
struct onebit_value {
  CHORUS_HD static float of(const std::byte* block, std::size_t header_bytes, std::size_t k) {
    const auto* signs = reinterpret_cast<const std::uint8_t*>(block + header_bytes);
    return codec::element::onebit_value(signs, k, load_float(block), load_float(block + sizeof(float)));
  }
};

template <bool Accumulate, class Value>
struct block_decode {
  block_geometry at;
  const std::byte* in;
  float* out;
  CHORUS_HD float value(std::size_t i) const {
    return decoded<Accumulate>(out, i, Value::of(in + at.byte(i / at.block), at.header_bytes, i % at.block));
  }
  CHORUS_HD void write(std::size_t i, float v) const { out[i] = v; }
};

// --- error feedback ------------------------------------------------------------------

struct add_residual {
  const float* values;
  const float* residual;
  float* work;
  CHORUS_HD float value(std::size_t i) const { return codec::element::with_residual(values[i], residual[i]); }
  CHORUS_HD void write(std::size_t i, float v) const { work[i] = v; }
};

struct keep_lost {
  const float* work;
  float* residual;  // holds the decoded values on entry
  CHORUS_HD float value(std::size_t i) const { return codec::element::lost(work[i], residual[i]); }
  CHORUS_HD void write(std::size_t i, float v) const { residual[i] = v; }
};

template <bool Accumulate, class Launch, class Codec>
void decode_with(const Launch& launch, const Codec& c, const std::byte* in, float* out, std::size_t n) {
  if constexpr (std::is_same_v<Codec, codec::fp16> || std::is_same_v<Codec, codec::bf16>) {
    launch.elements(n, two_byte_decode<Codec, Accumulate>{reinterpret_cast<const std::uint16_t*>(in), out},
                    "chorus two-byte decode kernel");
  } else if constexpr (std::is_same_v<Codec, codec::int8>) {
    launch.elements(
        n, block_decode<Accumulate, int8_value>{geometry_of<codec::detail::int8_payload>(c.granule(), n), in, out},
        "chorus int8 decode kernel");
  } else if constexpr (is_minifloat<Codec>) {
    using payload = codec::detail::minifloat_payload<codec::detail::code_bits<Codec::format>>;
    launch.elements(
        n, block_decode<Accumulate, minifloat_value<Codec::format>>{geometry_of<payload>(c.granule(), n), in, out},
        "chorus fp8/fp4 decode kernel");
  } else {
    static_assert(std::is_same_v<Codec, codec::onebit>,
                  "device kernels exist for fp16, bf16, int8, fp8, fp4 and onebit");
    launch.elements(
        n, block_decode<Accumulate, onebit_value>{geometry_of<codec::detail::onebit_payload>(c.granule(), n), in, out},
        "chorus onebit decode kernel");
  }
}

inline on_stream launcher_for(cudaStream_t stream) { return {stream}; }
inline on_stream launcher_for(std::nullptr_t) { return {}; }
inline const on_host_thread& launcher_for(const on_host_thread& host) { return host; }

}  // namespace detail

// Every call below runs on `where`: a cudaStream_t (default: the legacy
// default stream), or on_host_thread{} over host memory.

// --- reductions: the device twin of collective/machinery/reduce_local.hpp -------------------

// accumulate[i] = incoming_is_lower ? op(incoming[i], accumulate[i]) : op(accumulate[i], incoming[i]),
// over the accumulator type (float for half and bfloat16: widen first,
// narrow once at the end, as the host collectives do).
template <class A, class Op, class Where = cudaStream_t>
void reduce_into(A* accumulate, const A* incoming, std::size_t n, const Op& op, bool incoming_is_lower,
                 const Where& where = nullptr) {
  detail::launcher_for(where).elements(n, detail::reduce_step<A, Op>{accumulate, incoming, op, incoming_is_lower},
                                       "chorus reduce kernel");
}

// avg's division by the number of contributions; nothing for other ops.
template <class A, class Op, class Where = cudaStream_t>
void finalize(A* values, std::size_t n, const Op& op, std::size_t contributions, const Where& where = nullptr) {
  if constexpr (requires { op.finalize(A{}, contributions); })
    detail::launcher_for(where).elements(n, detail::finalize_step<A, Op>{values, op, contributions},
                                         "chorus finalize kernel");
}

// Element type to its accumulator (half -> float) and back, rounding once.
template <element T, class Where = cudaStream_t>
void widen(accumulator_t<T>* to, const T* from, std::size_t n, const Where& where = nullptr) {
  detail::launcher_for(where).elements(n, detail::convert_step<accumulator_t<T>, T>{to, from}, "chorus widen kernel");
}
template <element T, class Where = cudaStream_t>
void narrow(T* to, const accumulator_t<T>* from, std::size_t n, const Where& where = nullptr) {
  detail::launcher_for(where).elements(n, detail::convert_step<T, accumulator_t<T>>{to, from}, "chorus narrow kernel");
}

// --- the compressed collectives' scaling (compressed/scaling.hpp) ---------------------

// out[i] = in[i] * factor (in == out allowed).
template <class Where = cudaStream_t>
void multiply(const float* in, float* out, std::size_t n, float factor, const Where& where = nullptr) {
  detail::launcher_for(where).elements(n, detail::multiply_step{in, out, factor}, "chorus multiply kernel");
}
// values[i] /= divisor.
template <class Where = cudaStream_t>
void divide(float* values, std::size_t n, float divisor, const Where& where = nullptr) {
  detail::launcher_for(where).elements(n, detail::divide_step{values, divisor}, "chorus divide kernel");
}
template <class Where = cudaStream_t>
void zero(float* values, std::size_t n, const Where& where = nullptr) {
  detail::launcher_for(where).elements(n, detail::zero_step{values}, "chorus zero kernel");
}

// sum[i] = (first ? 0 : sum[i]) + weight * in[i], in double, never fused;
// then out[i] = float(sum[i]) (the window's combine: window/window.hpp).
template <class Where = cudaStream_t>
void weigh(double* sum, const float* in, std::size_t n, double weight, bool first, const Where& where = nullptr) {
  detail::launcher_for(where).elements(n, detail::weigh_step{sum, in, weight, first}, "chorus weigh kernel");
}
template <class Where = cudaStream_t>
void narrow_sum(const double* sum, float* out, std::size_t n, const Where& where = nullptr) {
  detail::launcher_for(where).elements(n, detail::convert_step<float, double>{out, sum}, "chorus narrow kernel");
}

// --- codecs: the device twins of encode, decode and decode_add ------------------

// `out` holds c.encoded_bytes(n) bytes, laid out as the CPU codec lays them.
template <class Codec, class Where = cudaStream_t>
void encode(const Codec& c, const float* in, std::byte* out, std::size_t n, const Where& where = nullptr) {
  const auto& launch = detail::launcher_for(where);
  if constexpr (std::is_same_v<Codec, codec::fp16> || std::is_same_v<Codec, codec::bf16>) {
    launch.elements(n, detail::two_byte_encode<Codec>{in, reinterpret_cast<std::uint16_t*>(out), c.policy()},
                    "chorus two-byte encode kernel");
  } else if constexpr (std::is_same_v<Codec, codec::int8>) {
    const auto at = detail::geometry_of<codec::detail::int8_payload>(c.granule(), n);
    launch.codec_blocks(at.blocks(), detail::int8_encode{{at, in, out}}, "chorus int8 encode kernel");
  } else if constexpr (detail::is_minifloat<Codec>) {
    using payload = codec::detail::minifloat_payload<codec::detail::code_bits<Codec::format>>;
    const auto at = detail::geometry_of<payload>(c.granule(), n);
    launch.codec_blocks(at.blocks(), detail::minifloat_encode<Codec>{{at, in, out}}, "chorus fp8/fp4 encode kernel");
  } else {
    static_assert(std::is_same_v<Codec, codec::onebit>,
                  "device kernels exist for fp16, bf16, int8, fp8, fp4 and onebit");
    const auto at = detail::geometry_of<codec::detail::onebit_payload>(c.granule(), n);
    launch.codec_blocks(at.blocks(), detail::onebit_encode{at, in, out}, "chorus onebit encode kernel");
  }
}

template <class Codec, class Where = cudaStream_t>
void decode(const Codec& c, const std::byte* in, float* out, std::size_t n, const Where& where = nullptr) {
  detail::decode_with<false>(detail::launcher_for(where), c, in, out, n);
}

template <class Codec, class Where = cudaStream_t>
void decode_add(const Codec& c, const std::byte* in, float* accumulate, std::size_t n, const Where& where = nullptr) {
  detail::decode_with<true>(detail::launcher_for(where), c, in, accumulate, n);
}

// One error-feedback step (codec/error_feedback.hpp) on device buffers:
// encodes values + residual into `out` and keeps what decoding lost in
// `residual` (zeros before the first step). `work`: n floats of scratch.
template <class Codec, class Where = cudaStream_t>
void error_feedback_encode(const Codec& c, const float* values, float* residual, float* work, std::byte* out,
                           std::size_t n, const Where& where = nullptr) {
  const auto& launch = detail::launcher_for(where);
  launch.elements(n, detail::add_residual{values, residual, work}, "chorus error-feedback kernel");
  encode(c, work, out, n, where);
  decode(c, out, residual, n, where);
  launch.elements(n, detail::keep_lost{work, residual}, "chorus error-feedback kernel");
}

// --- the direct path's arithmetic ---------------------------------------------------

// The device kernels behind cuda/device_compute.hpp, for the router's direct
// path: every element type, the built-in ops, and the codecs.
//
//   static chorus::cuda::kernels::compute kernels;
//   chorus::cuda::router gpu(chorus::cuda::runtime(), {}, &kernels);
class compute final : public device_compute {
 public:
  void reduce_into(void* accumulate, const void* incoming, std::size_t n, dtype type, std::string_view op,
                   bool incoming_is_lower, stream_handle stream) override {
    with_reduction(type, op, [&]<class T, class Op>(T*, Op o) {
      kernels::reduce_into(static_cast<T*>(accumulate), static_cast<const T*>(incoming), n, o, incoming_is_lower,
                           static_cast<cudaStream_t>(stream));
    });
  }
  void finalize(void* values, std::size_t n, dtype type, std::string_view op, std::size_t contributions,
                stream_handle stream) override {
    with_reduction(type, op, [&]<class T, class Op>(T*, Op o) {
      kernels::finalize(static_cast<T*>(values), n, o, contributions, static_cast<cudaStream_t>(stream));
    });
  }

  void multiply(const float* in, float* out, std::size_t n, float factor, stream_handle stream) override {
    kernels::multiply(in, out, n, factor, static_cast<cudaStream_t>(stream));
  }
  void divide(float* values, std::size_t n, float divisor, stream_handle stream) override {
    kernels::divide(values, n, divisor, static_cast<cudaStream_t>(stream));
  }
  void zero(float* values, std::size_t n, stream_handle stream) override {
    kernels::zero(values, n, static_cast<cudaStream_t>(stream));
  }
  void weigh(double* sum, const float* in, std::size_t n, double weight, bool first, stream_handle stream) override {
    kernels::weigh(sum, in, n, weight, first, static_cast<cudaStream_t>(stream));
  }
  void narrow(const double* sum, float* out, std::size_t n, stream_handle stream) override {
    kernels::narrow_sum(sum, out, n, static_cast<cudaStream_t>(stream));
  }
  void encode(const codec_spec& spec, const float* in, void* out, std::size_t n, stream_handle stream) override {
    with_codec(spec, [&](const auto& c) {
      kernels::encode(c, in, static_cast<std::byte*>(out), n, static_cast<cudaStream_t>(stream));
    });
  }
  void decode(const codec_spec& spec, const void* in, float* out, std::size_t n, bool accumulate,
              stream_handle stream) override {
    with_codec(spec, [&](const auto& c) {
      const auto* bytes = static_cast<const std::byte*>(in);
      if (accumulate)
        kernels::decode_add(c, bytes, out, n, static_cast<cudaStream_t>(stream));
      else
        kernels::decode(c, bytes, out, n, static_cast<cudaStream_t>(stream));
    });
  }
  void feedback_encode(const codec_spec& spec, const float* in, float* residual, float* work, void* out, std::size_t n,
                       stream_handle stream) override {
    with_codec(spec, [&](const auto& c) {
      kernels::error_feedback_encode(c, in, residual, work, static_cast<std::byte*>(out), n,
                                     static_cast<cudaStream_t>(stream));
    });
  }

 private:
  template <class Visit>
  static void with_codec(const codec_spec& spec, Visit&& visit) {
    if (!codec::visit_spec(spec, visit))
      throw error(errc::invalid_argument,
                  "device kernels: no codec '" + std::string(spec.name) + "' (" + codec::codec_names(true) + ")");
  }
  template <class Visit>
  static void with_reduction(dtype type, std::string_view op, Visit&& visit) {
    if (!visit_reduction(type, op, visit))
      throw error(errc::invalid_argument, "device kernels: no reduction of " + std::string(to_string(type)) + " by '" +
                                              std::string(op) +
                                              "' (built-in ops over types that are their own accumulator)");
  }
};

}  // namespace chorus::cuda::kernels
