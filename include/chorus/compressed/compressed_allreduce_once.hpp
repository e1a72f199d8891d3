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
// soon as it is encoded); the allgather is the pipelined ring
// (collective/machinery/ring_pipeline.hpp), decoding each piece as it lands.
//
// Large tensors go through in chunks (once_chunks), each an independent
// encode-once allreduce with the same error bound. Two chunks' reduce-
// scatters are on the wire at a time; when chunk c's has arrived, chunk
// c+2's starts, so the links stay busy while chunk c is summed, encoded and
// gathered and while the slowest of an alltoall's flows finish.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/ring_pipeline.hpp>
#include <chorus/compressed/codec_compute.hpp>
#include <chorus/compressed/partition.hpp>
#include <chorus/compressed/scaling.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

namespace chorus::compressed {

// Allgather segments: whole parts up to 4M elements; each segment of a
// part costs a message's latency (and, under rendezvous, a handshake),
// which smaller segments did not win back (docs/performance.md, "Pipelined
// chunks").
inline constexpr std::size_t once_segment_elements = 1u << 22;

// Pipelining: at most once_max_chunks chunks, and the reduce-scatters of
// once_in_flight of them on the wire at a time, so that a chunk is summed,
// encoded and gathered while the next one's reduce-scatter runs; each chunk
// adds the reduce-scatter's n-1 latencies (the sweep behind these numbers:
// docs/performance.md, "Pipelined chunks").
inline constexpr std::size_t once_max_chunks = 4;
inline constexpr std::size_t once_in_flight = 2;

// How many chunks: encoded size / chunk_bytes, within 1..once_max_chunks and
// no more than the tensor has codec granules.
template <class Codec>
std::size_t once_chunks(const Codec& c, std::size_t count, int ranks, std::size_t chunk_bytes) {
  if (ranks < 2 || chunk_bytes == 0) return 1;
  const std::size_t granules = (count + c.granule() - 1) / c.granule();
  return std::clamp<std::size_t>(c.encoded_bytes(count) / chunk_bytes, 1,
                                 std::clamp<std::size_t>(granules, 1, once_max_chunks));
}

namespace detail {

// One chunk of an encode-once allreduce: [chunk.offset, +chunk.count) of the
// tensor, with its own exchange (wire sequence) and its slices of the
// call's buffers. Phases, in order: post_receives, send_contribution,
// reduce_my_part, start_allgather, allgather, finish. Compute: codec_compute.hpp;
// every encoded part is settled before it is sent.
template <class Communicator, class Compute>
class once_chunk {
  using network_type =
      decltype(std::declval<const Compute&>().network(std::declval<collective::exchange<Communicator>&>()));

 public:
  using codec_type = typename Compute::codec_type;
  using request = typename Communicator::request;

  struct call {  // what every chunk of one call shares
    const Compute& compute;
    std::span<float> data;
    bool average;
    float scale;
    std::size_t segment_elements;
    std::span<std::byte> mine, gathered;  // the whole tensor's encodings
    std::span<float> scaled;              // the whole tensor, prescaled (empty when scale is 1)
  };

  once_chunk(Communicator& comm, const call& shared, range chunk)
      : own_(comm, "compressed allreduce"),
        ex_(shared.compute.network(own_)),
        shared_(shared),
        c_(shared.compute.codec()),
        chunk_(chunk),
        geometry_(c_, chunk.count, comm.size(), shared.segment_elements, own_.steps_left()),
        ring_steps_(own_.phase(geometry_.steps(), "direct exchange, then ring hops x segments")),
        ring_(ex_, geometry_, ring_steps_, 1),
        arriving_(static_cast<std::size_t>(comm.size())) {}

  std::size_t received_bytes() const {
    return geometry_.blocks().bytes(ex_.rank()) * static_cast<std::size_t>(ex_.size());
  }
  std::size_t my_part_size() const { return geometry_.blocks().size(ex_.rank()); }

  void post_receives(std::span<std::byte> received) {
    received_ = received;
    const int n = ex_.size(), me = ex_.rank();
    for (int k = 1; k < n; ++k) {
      const int source = (me - k + n) % n;
      arriving_[static_cast<std::size_t>(source)] = ex_.irecv(from(source), source, ring_steps_(geometry_.step(0, 0)));
    }
  }

  // My contribution encoded once, part p sent to rank p as soon as it is
  // encoded (my own part last).
  void send_contribution() {
    const int n = ex_.size(), me = ex_.rank();
    for (int k = 1; k < n; ++k) {
      const int peer = (me + k) % n;
      encode_part(peer);
      compute().settle();
      sends_.push_back(ex_.isend(std::span<const std::byte>(encoded(mine(), geometry_.whole(peer))), peer,
                                 ring_steps_(geometry_.step(0, 0))));
    }
    encode_part(me);
  }

  // The n contributions to my part summed in rank order (each as soon as it
  // is in), then encoded once. sum_offset/sum_total place this chunk's part
  // among all of this rank's parts, for error feedback's second slot.
  void reduce_my_part(std::span<float> sum, std::size_t sum_offset, std::size_t sum_total) {
    const int n = ex_.size(), me = ex_.rank();
    const std::size_t part_bytes = geometry_.blocks().bytes(me);
    compute().zero(sum);
    for (int r = 0; r < n; ++r) {
      if (r != me) ex_.finish_receive(arriving_[static_cast<std::size_t>(r)], part_bytes);
      compute().decode_add(r == me ? encoded(mine(), geometry_.whole(me)) : from(r), sum);
    }
    if (shared_.average) compute().divide(sum, static_cast<float>(n));
    compute().encode(sum, encoded(gathered(), geometry_.whole(me)), 1, sum_offset, sum_total);
    compute().settle();
  }

  // Around the ring, from hop 1 (hop 0's step is the direct exchange's);
  // everyone decodes the same bytes. start_allgather sends my summed part
  // on its first hop, so that the next chunk's contribution is encoded
  // while it travels.
  void start_allgather() {
    if (ex_.size() > 1) ring_.send_block(ex_.rank(), 1, [&](range r) { return encoded(gathered(), r); });
  }
  void allgather() {
    ring_.gather_hops(
        ex_.rank(), 1, static_cast<std::size_t>(ex_.size() - 1), [&](range r) { return encoded(gathered(), r); },
        [&](range r) { take_result(r); }, false);
    take_result(geometry_.whole(ex_.rank()));
  }

  void finish() {
    ex_.wait_all(sends_);
    ring_.finish();
  }

 private:
  const Compute& compute() const { return shared_.compute; }
  std::span<float> data() const { return shared_.data.subspan(chunk_.offset, chunk_.count); }
  std::span<std::byte> in_chunk(std::span<std::byte> whole) const {
    return whole.subspan(c_.encoded_bytes(chunk_.offset), c_.encoded_bytes(chunk_.count));
  }
  std::span<std::byte> mine() const { return in_chunk(shared_.mine); }
  std::span<std::byte> gathered() const { return in_chunk(shared_.gathered); }
  std::span<std::byte> encoded(std::span<std::byte> chunk_bytes, range r) const {
    return geometry_.encoded(chunk_bytes, r);
  }
  std::span<std::byte> from(int rank) const {
    const std::size_t bytes = geometry_.blocks().bytes(ex_.rank());
    return received_.subspan(static_cast<std::size_t>(rank) * bytes, bytes);
  }

  void encode_part(int p) {
    const range whole = geometry_.whole(p);
    std::span<const float> values = data().subspan(whole.offset, whole.count);
    if (shared_.scale != 1.0f) {
      const std::span<float> scaled = shared_.scaled.subspan(chunk_.offset + whole.offset, whole.count);
      compute().scale(values, scaled, shared_.scale);
      values = scaled;
    }
    compute().encode(values, encoded(mine(), whole), 0, chunk_.offset + whole.offset, shared_.data.size());
  }

  void take_result(range r) {
    compute().decode(encoded(gathered(), r), data().subspan(r.offset, r.count));
    compute().unscale(data().subspan(r.offset, r.count), shared_.scale);
  }

  collective::exchange<Communicator> own_;
  network_type ex_;
  const call& shared_;
  const codec_type& c_;
  range chunk_;
  segmented_partition<codec_type> geometry_;
  tag::phase ring_steps_;
  collective::ring_pipeline<std::remove_reference_t<network_type>> ring_;
  std::span<std::byte> received_;
  std::vector<request> arriving_, sends_;
};

}  // namespace detail

template <class Communicator, class Compute>
void allreduce_encode_once_with(Communicator& comm, std::span<float> data, const Compute& compute, bool average,
                                float scale, std::size_t chunk_bytes,
                                std::size_t segment_elements = once_segment_elements) {
  using chunk_type = detail::once_chunk<Communicator, Compute>;
  const auto& c = compute.codec();
  const std::size_t bytes = c.encoded_bytes(data.size());
  const typename chunk_type::call shared{compute,
                                         data,
                                         average,
                                         scale,
                                         segment_elements,
                                         compute.bytes(scratch_for::mine, bytes),
                                         compute.bytes(scratch_for::gathered, bytes),
                                         compute.floats(scratch_for::contribution, scale != 1.0f ? data.size() : 0)};

  // Every rank builds the chunks in the same order, so their wire sequences agree.
  const std::size_t count = once_chunks(c, data.size(), comm.size(), chunk_bytes);
  const encoded_partition<typename chunk_type::codec_type> cuts(c, data.size(), static_cast<int>(count));
  std::vector<chunk_type> chunks;
  chunks.reserve(count);  // never moved: a chunk's ring refers to the chunk's own exchange
  std::size_t received_bytes = 0, sum_total = 0, largest_part = 0;
  for (std::size_t k = 0; k < count; ++k) {
    chunks.emplace_back(comm, shared, range{cuts.offset(k), cuts.size(k)});
    received_bytes += chunks.back().received_bytes();
    sum_total += chunks.back().my_part_size();
    largest_part = std::max(largest_part, chunks.back().my_part_size());
  }
  const std::span<std::byte> received = compute.bytes(scratch_for::received, received_bytes);
  const std::span<float> sums = compute.floats(scratch_for::sum, largest_part);
  for (std::size_t offset = 0; auto& chunk : chunks) {
    chunk.post_receives(received.subspan(offset, chunk.received_bytes()));
    offset += chunk.received_bytes();
  }

  for (std::size_t k = 0; k < std::min(once_in_flight, count); ++k) chunks[k].send_contribution();
  for (std::size_t k = 0, sum_offset = 0; k < count; ++k) {
    const std::span<float> sum = sums.first(chunks[k].my_part_size());
    chunks[k].reduce_my_part(sum, sum_offset, sum_total);
    sum_offset += sum.size();
    chunks[k].start_allgather();
    if (k + once_in_flight < count) chunks[k + once_in_flight].send_contribution();
    chunks[k].allgather();
  }
  for (auto& chunk : chunks) chunk.finish();
}

template <class Communicator, class Coder>
void allreduce_encode_once(Communicator& comm, std::span<float> data, Coder&& coder, bool average, float scale,
                           std::size_t chunk_bytes, std::size_t segment_elements = once_segment_elements) {
  allreduce_encode_once_with(comm, data, host_codec_compute<std::remove_reference_t<Coder>>(coder), average, scale,
                             chunk_bytes, segment_elements);
}

namespace algorithms {
struct allreduce_encode_once {
  static constexpr algorithm id = algorithm::encode_once;
  static constexpr std::array<std::string_view, 1> aliases{"once"};
  static constexpr std::string_view cost =
      "n alpha + 2 (n-1)/n S_enc beta + S gamma_codec, each contribution encoded once";
  static constexpr std::string_view needs = "dense codecs";
  static bool suits(const workload& w) { return !w.sparse; }
  static double seconds(const workload& w, const machine& m) {
    return w.ranks * m.alpha + 2 * cost::share(w.ranks) * double(w.bytes) * m.beta + double(w.bytes) * m.gamma;
  }
  template <class Communicator, class Compute>
  static void run(Communicator& comm, std::span<float> data, const Compute& compute, bool average, float scale,
                  std::size_t chunk_bytes)
    requires(!codec::sparse<typename Compute::codec_type>)
  {
    compressed::allreduce_encode_once_with(comm, data, compute, average, scale, chunk_bytes);
  }
};
}  // namespace algorithms

}  // namespace chorus::compressed
