// Compressed allreduce that encodes each contribution once, for codecs that
// degrade under re-encoding (int8, onebit) and for small tensors.
//
// The tensor is cut into one part per rank along the codec's blocks.
// Reduce-scatter: each rank encodes its whole contribution once and sends
// part p's bytes to rank p; rank p decodes and adds the n contributions in
// float, in rank order. Allgather: rank p encodes its summed part once and
// sends it to everyone; every rank (p included) decodes the same bytes, so
// all end with identical bits.
//
// Error: |result - exact sum| <= sum_r e(x_r) + e(sum) + float rounding,
// with e the codec's per-element bound (error_bound.hpp computes it).
//
// Cost: n alpha + 2 (n-1)/n S_enc beta + S gamma_codec, S_enc the encoded
// size. The reduce-scatter has all n-1 parts in flight at once (each sent as
// soon as it is encoded); the allgather is the pipelined ring of
// ring_allgather.hpp, decoding each piece as it lands.
#pragma once

#include <chorus/codec/error_feedback.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/compressed/partition.hpp>
#include <chorus/compressed/ring_allgather.hpp>
#include <chorus/compressed/scaling.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

namespace chorus::compressed {

// Allgather segments: whole parts up to 4M elements. Over UCX's TCP
// transport, cutting an int8 part of 4 MiB into 1 MiB segments made the
// 64 MiB allreduce 15% slower on the shaped network (bench/ratelimited).
inline constexpr std::size_t once_segment_elements = 1u << 22;

template <class Communicator, class Coder>
void allreduce_encode_once(Communicator& comm, std::span<float> data, Coder&& coder, bool average, float scale,
                           std::size_t segment_elements = once_segment_elements) {
  using access = codec::codec_of<std::remove_cvref_t<Coder>>;
  using request = typename Communicator::request;
  const auto& c = access::get(coder);
  const int n = comm.size(), me = comm.rank();
  const segmented_partition geometry(c, data.size(), n, segment_elements);
  const auto& parts = geometry.blocks();
  workspace& space = workspace::local();
  collective::exchange ex(comm, "compressed allreduce");

  const std::span<std::byte> mine = sized(space.mine, parts.total_bytes());
  const std::span<std::byte> received = sized(space.received, parts.bytes(me) * static_cast<std::size_t>(n));
  const auto from = [&](int r) { return received.subspan(static_cast<std::size_t>(r) * parts.bytes(me), parts.bytes(me)); };
  std::vector<request> arriving(static_cast<std::size_t>(n)), sends;
  for (int k = 1; k < n; ++k) {
    const int source = (me - k + n) % n;
    arriving[static_cast<std::size_t>(source)] = ex.irecv(from(source), source, 0);
  }

  // Reduce-scatter: my contribution encoded once, part p sent to rank p as
  // soon as it is encoded (my own part last).
  const std::span<float> scaled = sized(space.contribution, scale != 1.0f ? data.size() : 0);
  const auto encode_part = [&](int p) {
    const range whole = geometry.whole(p);
    std::span<const float> values = data.subspan(whole.offset, whole.count);
    if (scale != 1.0f) {
      scale_into(values, scaled.subspan(whole.offset, whole.count), scale);
      values = scaled.subspan(whole.offset, whole.count);
    }
    access::encode(coder, values, geometry.encoded(mine, whole), 0, whole.offset, data.size());
  };
  for (int k = 1; k < n; ++k) {
    const int peer = (me + k) % n;
    encode_part(peer);
    sends.push_back(ex.isend(std::span<const std::byte>(geometry.encoded(mine, geometry.whole(peer))), peer, 0));
  }
  encode_part(me);

  // My part: the n contributions summed in rank order (each as soon as it is
  // in), then encoded once.
  const std::span<float> sum = sized(space.sum, parts.size(me));
  std::fill(sum.begin(), sum.end(), 0.0f);
  for (int r = 0; r < n; ++r) {
    if (r != me) ex.finish_receive(arriving[static_cast<std::size_t>(r)], parts.bytes(me));
    c.decode_add(r == me ? geometry.encoded(mine, geometry.whole(me)) : from(r), sum);
  }
  if (average)
    for (float& value : sum) value /= static_cast<float>(n);
  const std::span<std::byte> gathered = sized(space.gathered, parts.total_bytes());
  access::encode(coder, sum, geometry.encoded(gathered, geometry.whole(me)), 1);

  // Allgather around the ring; everyone decodes the same bytes.
  const auto take_result = [&](range r) {
    c.decode(geometry.encoded(gathered, r), data.subspan(r.offset, r.count));
    unscale(data.subspan(r.offset, r.count), scale);
  };
  ring_allgather(ex, geometry, gathered, {0, 1, true}, sends, take_result);
  take_result(geometry.whole(me));
  ex.wait_all(sends);
}

}  // namespace chorus::compressed
