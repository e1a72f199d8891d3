// Compressed ring allreduce, for codecs that re-encode well (fp16, bf16):
// the pipelined ring (collective/machinery/ring_pipeline.hpp) carrying encoded
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
// with codecs that re-encode well (compressed/compression_options.hpp).
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/collective/machinery/algorithm_list.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/ring_pipeline.hpp>
#include <chorus/compressed/codec_compute.hpp>
#include <chorus/compressed/partition.hpp>
#include <chorus/compressed/scaling.hpp>

#include <array>
#include <cstddef>
#include <span>
#include <string_view>
#include <type_traits>
#include <utility>

namespace chorus::compressed {

using collective::ring_settings;

// Compute: codec_compute.hpp (host, or routed for the direct path). Every
// encoded piece is settled before it is sent, and every piece of the
// window before the window takes the next one.
template <class Communicator, class Compute>
class compressed_ring {
  using codec_type = typename Compute::codec_type;
  using network_type =
      decltype(std::declval<const Compute&>().network(std::declval<collective::exchange<Communicator>&>()));

 public:
  compressed_ring(Communicator& comm, std::span<float> data, const Compute& compute, bool average, float scale,
                  ring_settings settings = {})
      : own_(comm, "compressed allreduce"),
        ex_(compute.network(own_)),
        compute_(compute),
        data_(data),
        codec_(compute.codec()),
        n_(comm.size()),
        rank_(comm.rank()),
        average_(average),
        scale_(scale),
        geometry_(codec_, data.size(), n_, settings.segment_bytes / sizeof(float), own_.steps_left()),
        ring_(ex_, geometry_, own_.phase(geometry_.steps(), "ring hops x segments"), settings.depth) {
    outgoing_ = compute_.bytes(scratch_for::mine, geometry_.blocks().total_bytes());
    gathered_ = compute_.bytes(scratch_for::gathered, geometry_.blocks().total_bytes());
    window_ = compute_.bytes(scratch_for::received, ring_.depth() * slot_bytes());
    partial_ = compute_.floats(scratch_for::sum, geometry_.segment());
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
    compute_.encode(values, out, 0, r.offset, data_.size());
  }

  std::span<std::byte> encode_own(range r) {
    const std::span<float> scaled = partial_.first(r.count);
    compute_.scale(values(r), scaled, scale_);
    encode(scaled, geometry_.encoded(outgoing_, r), r);
    compute_.settle();
    return geometry_.encoded(outgoing_, r);
  }

  // My contribution plus the arriving partial sum, encoded for the right
  // neighbour; at the last hop the sum is final and encoded once, for all.
  std::span<std::byte> add(range r, std::span<const std::byte> arrived, bool final_sum) {
    const std::span<float> sum = partial_.first(r.count);
    compute_.scale(values(r), sum, scale_);
    compute_.decode_add(arrived, sum);
    const std::span<std::byte> out = geometry_.encoded(final_sum ? gathered_ : outgoing_, r);
    if (final_sum && average_) compute_.divide(sum, static_cast<float>(n_));
    encode(sum, out, r);
    if (final_sum) take_result(r);
    compute_.settle();
    return out;
  }

  void take_result(range r) {
    compute_.decode(geometry_.encoded(gathered_, r), values(r));
    compute_.unscale(values(r), scale_);
  }

  collective::exchange<Communicator> own_;
  network_type ex_;
  const Compute& compute_;
  std::span<float> data_;
  const codec_type& codec_;
  int n_, rank_;
  bool average_;
  float scale_;
  segmented_partition<codec_type> geometry_;
  collective::ring_pipeline<std::remove_reference_t<network_type>> ring_;
  std::span<std::byte> outgoing_, gathered_, window_;
  std::span<float> partial_;
};

template <class Communicator, class Compute>
void allreduce_ring_with(Communicator& comm, std::span<float> data, const Compute& compute, bool average, float scale,
                         ring_settings settings = {}) {
  compressed_ring<Communicator, Compute>(comm, data, compute, average, scale, settings).run();
}

template <class Communicator, class Coder>
void allreduce_ring(Communicator& comm, std::span<float> data, Coder&& coder, bool average, float scale,
                    ring_settings settings = {}) {
  allreduce_ring_with(comm, data, host_codec_compute<std::remove_reference_t<Coder>>(coder), average, scale, settings);
}

namespace algorithms {
struct allreduce_ring {
  static constexpr algorithm id = algorithm::ring;
  static constexpr std::string_view cost =
      "2 (n-1) alpha + 2 (n-1)/n S_enc beta + S gamma_codec, partial sums re-encoded per hop";
  static constexpr std::string_view needs = "dense codecs that re-encode well (fp16, bf16)";
  static bool suits(const workload& w) { return !w.sparse && w.reencodes_well; }
  static double seconds(const workload& w, const machine& m) {
    return 2 * (w.ranks - 1) * m.alpha + 2 * cost::share(w.ranks) * double(w.bytes) * m.beta +
           double(w.bytes) * m.gamma;
  }
  template <class Communicator, class Compute>
  static void run(Communicator& comm, std::span<float> data, const Compute& compute, bool average, float scale,
                  std::size_t)
    requires(!codec::sparse<typename Compute::codec_type>)
  {
    compressed::allreduce_ring_with(comm, data, compute, average, scale);
  }
};
}  // namespace algorithms

}  // namespace chorus::compressed
