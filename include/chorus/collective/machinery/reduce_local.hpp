// The local reduction kernels: combine an incoming block into an
// accumulating one, or k contributions into one output. The operand order
// is fixed by rank (the lower rank's contribution is always the left
// operand), so that two ranks combining the same pair of blocks get the
// same bits even for operators that are only commutative up to rounding.
//
// Written once, as portable C++ in lane blocks the compiler vectorises; on
// x86-64 (GCC, Clang) each is compiled again for AVX2 and for AVX-512, and
// the widest the CPU has runs, chosen once per process. The operations are
// element-wise (no horizontal sums, nothing to contract into an FMA), so
// every width gives the same bits. bench/memory_bound measures them against
// memcpy of the same bytes.
#pragma once

#include <chorus/core/reduce_op.hpp>
#include <chorus/core/simd.hpp>

#include <cstddef>
#include <span>

namespace chorus::collective {

// Lanes per block of the kernel below. The block goes through a local array
// so the compiler knows the loads happen before the stores: without that,
// GCC at -O2 (its "very cheap" vectoriser) will not version the loop for
// possible aliasing and the reduction runs scalar (bench/memory_bound
// shows the difference).
inline constexpr std::size_t reduce_lanes = 16;

// The dispatch below: x86-64 with GCC or Clang, outside nvcc's host pass.
#if CHORUS_X86_SIMD && !defined(__CUDACC__)
#define CHORUS_REDUCE_DISPATCH 1
#else
#define CHORUS_REDUCE_DISPATCH 0
#endif

namespace kernel {

// out[i] = incoming_is_lower ? op(in[i], out[i]) : op(out[i], in[i])
template <class A, class Op>
[[gnu::always_inline]] inline void reduce_into(A* out, const A* in, std::size_t n, const Op& op,
                                               bool incoming_is_lower) {
  std::size_t i = 0;
  for (; i + reduce_lanes <= n; i += reduce_lanes) {
    A block[reduce_lanes];
    if (incoming_is_lower) {
      for (std::size_t k = 0; k < reduce_lanes; ++k) block[k] = op(in[i + k], out[i + k]);
    } else {
      for (std::size_t k = 0; k < reduce_lanes; ++k) block[k] = op(out[i + k], in[i + k]);
    }
    for (std::size_t k = 0; k < reduce_lanes; ++k) out[i + k] = block[k];
  }
  for (; i < n; ++i) out[i] = incoming_is_lower ? op(in[i], out[i]) : op(out[i], in[i]);
}

// out[i] = op(...op(op(inputs[0][i], inputs[1][i]), inputs[2][i])..., inputs[k-1][i]),
// each lane block kept in registers, so `out` may be one of the inputs.
template <class A, class Op>
[[gnu::always_inline]] inline void reduce_many(A* out, std::size_t n, const A* const* inputs, std::size_t k,
                                               const Op& op) {
  std::size_t i = 0;
  for (; i + reduce_lanes <= n; i += reduce_lanes) {
    A block[reduce_lanes];
    for (std::size_t lane = 0; lane < reduce_lanes; ++lane) block[lane] = inputs[0][i + lane];
    for (std::size_t j = 1; j < k; ++j) {
      const A* in = inputs[j] + i;
      for (std::size_t lane = 0; lane < reduce_lanes; ++lane) block[lane] = op(block[lane], in[lane]);
    }
    for (std::size_t lane = 0; lane < reduce_lanes; ++lane) out[i + lane] = block[lane];
  }
  for (; i < n; ++i) {
    A value = inputs[0][i];
    for (std::size_t j = 1; j < k; ++j) value = op(value, inputs[j][i]);
    out[i] = value;
  }
}

using simd::width;

#if CHORUS_REDUCE_DISPATCH
// The two kernels again, compiled for AVX2 and for AVX-512.
template <class A, class Op>
CHORUS_TARGET_AVX2 void reduce_into_avx2(A* out, const A* in, std::size_t n, const Op& op, bool incoming_is_lower) {
  reduce_into(out, in, n, op, incoming_is_lower);
}
template <class A, class Op>
CHORUS_TARGET_AVX512 void reduce_into_avx512(A* out, const A* in, std::size_t n, const Op& op, bool incoming_is_lower) {
  reduce_into(out, in, n, op, incoming_is_lower);
}
template <class A, class Op>
CHORUS_TARGET_AVX2 void reduce_many_avx2(A* out, std::size_t n, const A* const* inputs, std::size_t k, const Op& op) {
  reduce_many(out, n, inputs, k, op);
}
template <class A, class Op>
CHORUS_TARGET_AVX512 void reduce_many_avx512(A* out, std::size_t n, const A* const* inputs, std::size_t k,
                                             const Op& op) {
  reduce_many(out, n, inputs, k, op);
}

#endif

// The kernels at a given width (one this CPU runs, simd::runs): what the
// dispatch below runs, and what the tests and bench/memory_bound compare.
template <class A, class Op>
void reduce_into_at(width at, std::span<A> accumulate, std::span<const A> incoming, const Op& op,
                    bool incoming_is_lower) {
  const std::size_t n = accumulate.size();
#if CHORUS_REDUCE_DISPATCH
  if (at == width::avx512) return reduce_into_avx512(accumulate.data(), incoming.data(), n, op, incoming_is_lower);
  if (at == width::avx2) return reduce_into_avx2(accumulate.data(), incoming.data(), n, op, incoming_is_lower);
#endif
  (void)at;
  reduce_into(accumulate.data(), incoming.data(), n, op, incoming_is_lower);
}
template <class A, class Op>
void reduce_many_at(width at, std::span<A> out, std::span<const A* const> inputs, const Op& op) {
#if CHORUS_REDUCE_DISPATCH
  if (at == width::avx512) return reduce_many_avx512(out.data(), out.size(), inputs.data(), inputs.size(), op);
  if (at == width::avx2) return reduce_many_avx2(out.data(), out.size(), inputs.data(), inputs.size(), op);
#endif
  (void)at;
  reduce_many(out.data(), out.size(), inputs.data(), inputs.size(), op);
}

}  // namespace kernel

// accumulate[i] = incoming_is_lower ? op(incoming[i], accumulate[i]) : op(accumulate[i], incoming[i])
template <class A, class Op>
void reduce_into(std::span<A> accumulate, std::span<const A> incoming, const Op& op, bool incoming_is_lower) {
  kernel::reduce_into_at(simd::widest(), accumulate, incoming, op, incoming_is_lower);
}

// out[i] = op(...op(op(inputs[0][i], inputs[1][i]), inputs[2][i])..., inputs[k-1][i]):
// k contributions folded in their order (rank order: the same bits wherever
// it runs), each input read once; `out` may be one of the inputs.
template <class A, class Op>
void reduce_many(std::span<A> out, std::span<const A* const> inputs, const Op& op) {
  kernel::reduce_many_at(simd::widest(), out, inputs, op);
}

template <class A, class Op>
void finalize_all(std::span<A> values, const Op& op, std::size_t contributions) {
  if constexpr (requires { op.finalize(values[0], contributions); })
    for (A& value : values) value = op.finalize(value, contributions);
}

}  // namespace chorus::collective
