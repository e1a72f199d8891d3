// Compressed allreduce: every rank sends encoded bytes, sums in float, and
// ends with the same bits.
//
//   chorus::allreduce(comm, grads, chorus::op::avg{}, chorus::codec::fp16{});
//   chorus::codec::error_feedback feedback{chorus::codec::int8{}};   // one per tensor
//   chorus::allreduce(comm, grads, chorus::op::sum{}, feedback);
//
// Scheme (encode each contribution once): the tensor is cut into one part
// per rank along the codec's blocks. Reduce-scatter: each rank encodes its
// whole contribution once and sends part p's bytes to rank p; rank p decodes
// and adds the n contributions in float, in rank order. Allgather: rank p
// encodes its summed part once and sends it to everyone; every rank (p
// included) decodes the same bytes, so all end with identical bits.
//
// Error: each contribution is encoded once and the sum once, so
//   |result - exact sum| <= sum_r e(x_r) + e(sum) + float rounding,
// with e the codec's per-element bound (see error_bound.hpp, which computes
// it). Re-encoding partial sums hop by hop (a ring) would instead add n-1
// encodings of growing partial sums: fine for fp16, ruinous for int8/1-bit.
//
// Cost: 2 (n-1) alpha + 2 (n-1)/n S_enc beta + S gamma_codec, S_enc the
// encoded size: the bandwidth of a ring on 1/2 (fp16), ~1/4 (int8) or ~1/26
// (onebit) of the bytes. All n-1 messages of a phase are in flight at once
// (sequencing them in pairwise rounds, or cutting them into 512 KiB chunks,
// changed nothing on a shaped 1 Gbit/s network; see docs/performance.md).
//
// Overflow: contributions are multiplied by `prescale` before encoding and
// the result divided by it after decoding. Default: 2^-ceil(log2 n) for
// codecs with a narrow range (fp16), so a sum of n values near 6e4 stays
// finite; 1 for the others. A power of two scales exactly.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/codec/error_feedback.hpp>
#include <chorus/collective/check.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/compressed/partition.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/reduce_op.hpp>

#include <bit>
#include <cmath>
#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace chorus {

struct compression_options {
  std::optional<float> prescale;  // see the header comment
};

namespace compressed {

template <class Codec>
float prescale_for(int ranks, const compression_options& options) {
  if (options.prescale) {
    if (!(*options.prescale > 0.0f) || !std::isfinite(*options.prescale))
      throw error(errc::invalid_argument, "compressed allreduce: prescale " + std::to_string(*options.prescale) +
                                              " is not a positive finite factor");
    return *options.prescale;
  }
  if (!codec::limited_range<Codec>) return 1.0f;
  return 1.0f / static_cast<float>(std::bit_ceil(static_cast<unsigned>(ranks)));
}

// Per-thread buffers, grown as needed and kept for the next call.
struct workspace {
  std::vector<float> contribution, sum;
  std::vector<std::byte> mine, received, gathered;

  static workspace& local() {
    thread_local workspace buffers;
    return buffers;
  }
};

template <class T>
std::span<T> sized(std::vector<T>& storage, std::size_t count) {
  if (storage.size() < count) storage.resize(count);
  return std::span<T>(storage).first(count);
}

// out[i] = in[i] * factor, in blocks through a local array so that GCC's
// -O2 vectoriser runs it (it will not version a plain loop for aliasing).
inline void scale_into(std::span<const float> in, std::span<float> out, float factor) {
  constexpr std::size_t lanes = 16;
  std::size_t i = 0;
  for (; i + lanes <= in.size(); i += lanes) {
    float block[lanes];
    for (std::size_t k = 0; k < lanes; ++k) block[k] = in[i + k] * factor;
    for (std::size_t k = 0; k < lanes; ++k) out[i + k] = block[k];
  }
  for (; i < in.size(); ++i) out[i] = in[i] * factor;
}

// Undoing the prescale: multiplying by 1/s equals dividing by s exactly when
// s is a power of two (the default); otherwise divide.
inline void unscale(std::span<float> data, float prescale) {
  int exponent = 0;
  if (std::frexp(prescale, &exponent) == 0.5f) {
    scale_into(data, data, 1.0f / prescale);
    return;
  }
  for (float& value : data) value /= prescale;
}

template <class Op>
constexpr bool supported_op = std::is_same_v<Op, op::sum> || std::is_same_v<Op, op::avg>;

template <class Op, class Codec>
std::string signature_op() {
  std::string text = std::string(op::name_of<Op>()) + "/" + std::string(Codec::name);
  return text.substr(0, 15);
}

}  // namespace compressed

template <class Communicator, class Op, codec::codec_or_feedback Codec>
void allreduce(Communicator& comm, std::span<float> data, Op, Codec&& coder, compression_options options = {}) {
  static_assert(compressed::supported_op<Op>, "a compressed allreduce sums (op::sum) or averages (op::avg)");
  using access = codec::codec_of<std::remove_cvref_t<Codec>>;
  using plain = typename access::type;
  const plain& c = access::get(coder);
  if (collective::check_enabled(comm))  // the signature string only when it is checked
    collective::check_agreement(comm, {"allreduce", data.size(), dtype::float32, compressed::signature_op<Op, plain>(), -1});
  const int n = comm.size(), me = comm.rank();
  const float scale = compressed::prescale_for<plain>(n, options);
  const compressed::encoded_partition<plain> parts(c, data.size(), n);
  compressed::workspace& space = compressed::workspace::local();
  collective::exchange ex(comm, "compressed allreduce");

  // Reduce-scatter: encode my contribution once, send part p to rank p.
  std::span<const float> contribution = data;
  if (scale != 1.0f) {
    const std::span<float> scaled = compressed::sized(space.contribution, data.size());
    compressed::scale_into(data, scaled, scale);
    contribution = scaled;
  }
  const std::span<std::byte> mine = compressed::sized(space.mine, parts.total_bytes());
  access::encode(coder, contribution, mine, 0);
  const std::size_t my_bytes = parts.bytes(me);
  const std::span<std::byte> received = compressed::sized(space.received, my_bytes * static_cast<std::size_t>(n));
  const auto from = [&](int r) { return received.subspan(static_cast<std::size_t>(r) * my_bytes, my_bytes); };
  const auto part_of = [&](std::span<std::byte> whole, int p) { return whole.subspan(parts.byte_offset(p), parts.bytes(p)); };
  std::vector<typename Communicator::request> requests;
  requests.reserve(2 * static_cast<std::size_t>(n));
  for (int k = 1; k < n; ++k) {
    const int peer = (me + k) % n, source = (me - k + n) % n;
    requests.push_back(ex.irecv(from(source), source, 0));
    requests.push_back(ex.isend(std::span<const std::byte>(part_of(mine, peer)), peer, 0));
  }
  ex.wait_all(requests);
  for (std::size_t i = 0; i < requests.size(); i += 2) comm.expect_bytes(requests[i], my_bytes, "compressed allreduce");
  requests.clear();

  // My part: the n contributions summed in rank order, then encoded once.
  const std::span<float> sum = compressed::sized(space.sum, parts.size(me));
  std::fill(sum.begin(), sum.end(), 0.0f);
  for (int r = 0; r < n; ++r) c.decode_add(r == me ? part_of(mine, me) : from(r), sum);
  if constexpr (std::is_same_v<Op, op::avg>)
    for (float& value : sum) value /= static_cast<float>(n);
  const std::span<std::byte> gathered = compressed::sized(space.gathered, parts.total_bytes());
  access::encode(coder, sum, part_of(gathered, me), 1);

  // Allgather of the encoded parts; everyone decodes the same bytes.
  for (int k = 1; k < n; ++k) {
    const int peer = (me + k) % n, source = (me - k + n) % n;
    requests.push_back(ex.irecv(part_of(gathered, source), source, 1));
    requests.push_back(ex.isend(std::span<const std::byte>(part_of(gathered, me)), peer, 1));
  }
  ex.wait_all(requests);
  for (std::size_t i = 0, k = 1; i < requests.size(); i += 2, ++k)
    comm.expect_bytes(requests[i], parts.bytes((me - static_cast<int>(k) + n) % n), "compressed allreduce");
  c.decode(gathered, data);
  if (scale != 1.0f) compressed::unscale(data, scale);
}

}  // namespace chorus
