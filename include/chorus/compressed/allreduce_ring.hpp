// Compressed ring allreduce, for codecs that re-encode well (fp16, bf16):
// the pipelined ring of collective/allreduce_ring.hpp carrying encoded
// segments. At each reduce-scatter hop a rank decodes the arriving partial
// sum into float, adds its own contribution and encodes the result for its
// right neighbour; the rank that adds the last contribution encodes the
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
#include <chorus/compressed/partition.hpp>
#include <chorus/compressed/ring_allgather.hpp>
#include <chorus/compressed/scaling.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

namespace chorus::compressed {

struct ring_settings {
  std::size_t segment_elements = 1u << 16;  // rounded up to the codec's granule
  std::size_t depth = 4;                    // segment receives in flight
};

template <class Communicator, class Coder>
class compressed_ring {
  using access = codec::codec_of<std::remove_cvref_t<Coder>>;
  using plain = typename access::type;
  using request = typename Communicator::request;

 public:
  compressed_ring(Communicator& comm, std::span<float> data, Coder& coder, bool average, float scale,
                  ring_settings settings = {})
      : ex_(comm, "compressed allreduce"), data_(data), coder_(coder), codec_(access::get(coder)),
        n_(comm.size()), rank_(comm.rank()), average_(average), scale_(scale),
        geometry_(codec_, data.size(), n_, settings.segment_elements),
        ring_steps_(ex_.phase(geometry_.steps(), "ring hops x segments")),
        depth_(std::max<std::size_t>(1, std::min(settings.depth, geometry_.segments_per_block()))) {
    workspace& space = workspace::local();
    outgoing_ = sized(space.mine, geometry_.blocks().total_bytes());
    gathered_ = sized(space.gathered, geometry_.blocks().total_bytes());
    window_ = sized(space.received, depth_ * codec_.encoded_bytes(geometry_.segment()));
    partial_ = sized(space.sum, geometry_.segment());
  }

  void run() {
    send_own_block();
    reduce_scatter();
    // Rank r ends the reduce-scatter owning block r+1, already sent on.
    ring_allgather(ex_, geometry_, ring_steps_, gathered_, {1, static_cast<std::size_t>(n_ - 1)}, sends_,
                   [&](range r) { take_result(r); });
    ex_.wait_all(sends_);
  }

 private:
  std::span<float> values(range r) const { return data_.subspan(r.offset, r.count); }
  int right() const { return (rank_ + 1) % n_; }

  void encode(std::span<const float> values, std::span<std::byte> out, range r) {
    access::encode(coder_, values, out, 0, r.offset, data_.size());
  }
  void send_right(std::span<std::byte> bytes, std::uint32_t tag_step) {
    sends_.push_back(ex_.isend(std::span<const std::byte>(bytes), right(), tag_step));
  }

  void send_own_block() {
    for (std::size_t k = 0; k < geometry_.pieces(rank_); ++k) {
      const range r = geometry_.piece(rank_, k);
      const std::span<float> scaled = partial_.first(r.count);
      scale_into(values(r), scaled, scale_);
      encode(scaled, geometry_.encoded(outgoing_, r), r);
      send_right(geometry_.encoded(outgoing_, r), ring_steps_(geometry_.step(0, k)));
    }
  }

  // At hop h block r-h-1 arrives from the left; at the last hop it is final.
  void reduce_scatter() {
    const int left = (rank_ - 1 + n_) % n_;
    std::vector<request> receives(depth_);
    for (std::size_t hop = 0; hop + 1 < static_cast<std::size_t>(n_); ++hop) {
      const int block = geometry_.block_of(rank_ - static_cast<int>(hop) - 1);
      const bool final_sum = hop + 2 == static_cast<std::size_t>(n_);
      const auto slot = [&](std::size_t k) {
        return window_.subspan((k % depth_) * codec_.encoded_bytes(geometry_.segment()),
                               geometry_.encoded_size(geometry_.piece(block, k)));
      };
      const std::size_t count = geometry_.pieces(block);
      for (std::size_t k = 0; k < std::min(depth_, count); ++k)
        receives[k] = ex_.irecv(slot(k), left, ring_steps_(geometry_.step(hop, k)));
      for (std::size_t k = 0; k < count; ++k) {
        const range r = geometry_.piece(block, k);
        ex_.finish_receive(receives[k % depth_], slot(k).size());
        const std::span<float> sum = partial_.first(r.count);
        scale_into(values(r), sum, scale_);
        codec_.decode_add(slot(k), sum);
        if (k + depth_ < count) receives[k % depth_] = ex_.irecv(slot(k + depth_), left, ring_steps_(geometry_.step(hop, k + depth_)));
        if (final_sum) finish_block_piece(sum, r);
        else encode(sum, geometry_.encoded(outgoing_, r), r);
        send_right(geometry_.encoded(final_sum ? gathered_ : outgoing_, r), ring_steps_(geometry_.step(hop + 1, k)));
      }
    }
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
  tag::phase ring_steps_;
  std::size_t depth_;
  std::span<std::byte> outgoing_, gathered_, window_;
  std::span<float> partial_;
  std::vector<request> sends_;
};

template <class Communicator, class Coder>
void allreduce_ring(Communicator& comm, std::span<float> data, Coder&& coder, bool average, float scale,
                    ring_settings settings = {}) {
  compressed_ring<Communicator, std::remove_reference_t<Coder>>(comm, data, coder, average, scale, settings).run();
}

}  // namespace chorus::compressed
