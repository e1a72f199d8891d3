// Compressed ring allreduce, for codecs that re-encode well (fp16, bf16):
// the pipelined ring (collective/ring_pipeline.hpp) carrying encoded
// segments. At each reduce-scatter hop a rank decodes the arriving partial
// sum into float, adds its own contribution and encodes the result for its
// right neighbour (the pipeline's combine step); the rank that adds the last contribution encodes the
// final sum once, and the allgather passes those bytes on unchanged, so every
// rank decodes the same bytes and all end with identical bits.
//
// Error: each block's partial sum is encoded at each of its n-1 hops, and
// the final sum once: |result - exact| <= sum_h e(|P_h|) + e(|sum|) + float
// rounding, P_h the partial sum after h+1 contributions. error_bound.hpp
// bounds every |P_h| by sum_r |x_r|: for fp16 about n 2^-11 sum_r |x_r|,
// against 2 2^-11 sum_r |x_r| when each contribution is encoded once.
//
// Cost: 2 (n-1) alpha + 2 (n-1)/n S_enc beta + S gamma_codec, S_enc the
// encoded size. Each rank sends to one neighbour and receives from the
// other, all the time: a shaped network carries that at its rate, where n-1
// flows per link (encode once) lose a third of it. Chosen for large tensors
// with codecs that re-encode well (compressed/options.hpp).
#pragma once

#include <chorus/codec/error_feedback.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/collective/ring_pipeline.hpp>
#include <chorus/compressed/partition.hpp>
#include <chorus/compressed/scaling.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

namespace chorus::compressed {

using collective::ring_settings;

template <class Communicator, class Coder>
class compressed_ring {
  using access = codec::codec_of<std::remove_cvref_t<Coder>>;
  using plain = typename access::type;

 public:
  compressed_ring(Communicator& comm, std::span<float> data, Coder& coder, bool average, float scale,
                  ring_settings settings = {})
      : ex_(comm, "compressed allreduce"), data_(data), coder_(coder), codec_(access::get(coder)),
        n_(comm.size()), rank_(comm.rank()), average_(average), scale_(scale),
        geometry_(codec_, data.size(), n_, settings.segment_bytes / sizeof(float), ex_.steps_left()),
        ring_(ex_, geometry_, ex_.phase(geometry_.steps(), "ring hops x segments"), settings.depth) {
    workspace& space = workspace::local();
    outgoing_ = sized(space.mine, geometry_.blocks().total_bytes());
    gathered_ = sized(space.gathered, geometry_.blocks().total_bytes());
    window_ = sized(space.received, ring_.depth() * slot_bytes());
    partial_ = sized(space.sum, geometry_.segment());
  }

  void run() {
    const auto hops = static_cast<std::size_t>(n_ - 1);
    ring_.reduce_hops(
        rank_, 0, hops, [&](range r) { return encode_own(r); }, window_, slot_bytes(),
        [&](range r) { return geometry_.encoded_size(r); },
        [&](range r, std::span<const std::byte> arrived, bool last) { return add(r, arrived, last); }, true);
    // Rank r now owns block r+1, already sent on as the first gather hop.
    ring_.gather_hops(
        rank_ + 1, hops, hops, [&](range r) { return geometry_.encoded(gathered_, r); },
        [&](range r) { take_result(r); }, false);
    ring_.finish();
  }

 private:
  std::span<float> values(range r) const { return data_.subspan(r.offset, r.count); }
  std::size_t slot_bytes() const { return codec_.encoded_bytes(geometry_.segment()); }

  void encode(std::span<const float> values, std::span<std::byte> out, range r) {
    access::encode(coder_, values, out, 0, r.offset, data_.size());
  }

  std::span<std::byte> encode_own(range r) {
    const std::span<float> scaled = partial_.first(r.count);
    scale_into(values(r), scaled, scale_);
    encode(scaled, geometry_.encoded(outgoing_, r), r);
    return geometry_.encoded(outgoing_, r);
  }

  // My contribution plus the arriving partial sum, encoded for the right
  // neighbour; at the last hop the sum is final and encoded once, for all.
  std::span<std::byte> add(range r, std::span<const std::byte> arrived, bool final_sum) {
    const std::span<float> sum = partial_.first(r.count);
    scale_into(values(r), sum, scale_);
    codec_.decode_add(arrived, sum);
    if (final_sum) {
      finish_block_piece(sum, r);
      return geometry_.encoded(gathered_, r);
    }
    encode(sum, geometry_.encoded(outgoing_, r), r);
    return geometry_.encoded(outgoing_, r);
  }

  void finish_block_piece(std::span<float> sum, range r) {
    if (average_)
      for (float& value : sum) value /= static_cast<float>(n_);
    encode(sum, geometry_.encoded(gathered_, r), r);
    take_result(r);
  }
  void take_result(range r) {
    codec_.decode(geometry_.encoded(gathered_, r), values(r));
    unscale(values(r), scale_);
  }

  collective::exchange<Communicator> ex_;
  std::span<float> data_;
  Coder& coder_;
  const plain& codec_;
  int n_, rank_;
  bool average_;
  float scale_;
  segmented_partition<plain> geometry_;
  collective::ring_pipeline<collective::exchange<Communicator>> ring_;
  std::span<std::byte> outgoing_, gathered_, window_;
  std::span<float> partial_;
};

template <class Communicator, class Coder>
void allreduce_ring(Communicator& comm, std::span<float> data, Coder&& coder, bool average, float scale,
                    ring_settings settings = {}) {
  compressed_ring<Communicator, std::remove_reference_t<Coder>>(comm, data, coder, average, scale, settings).run();
}

}  // namespace chorus::compressed
