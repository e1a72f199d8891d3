// How the compressed collectives cut a tensor: one block per rank along the
// codec's granule (whole codec blocks), so that each block's encoding is a
// contiguous byte range of the whole tensor's encoding; and, for the
// pipelined ring, each block into segments of whole granules.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/collective/machinery/block_partition.hpp>
#include <chorus/collective/machinery/ring_geometry.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace chorus::compressed {

template <class Codec>
class encoded_partition {
 public:
  encoded_partition(const Codec& codec, std::size_t count, int parts)
      : codec_(codec),
        count_(count),
        units_{(count + codec.granule() - 1) / codec.granule(), static_cast<std::size_t>(parts)} {}

  std::size_t offset(std::size_t part) const { return std::min(count_, units_.offset(part) * codec_.granule()); }
  std::size_t size(std::size_t part) const { return offset(part + 1) - offset(part); }
  std::size_t byte_offset(std::size_t part) const { return codec_.encoded_bytes(offset(part)); }
  std::size_t bytes(std::size_t part) const { return codec_.encoded_bytes(offset(part + 1)) - byte_offset(part); }
  std::size_t total_bytes() const { return codec_.encoded_bytes(count_); }

 private:
  const Codec& codec_;
  std::size_t count_;
  collective::block_partition units_;
};

using collective::range;

// One block per rank along the codec's granule, each cut into segments of
// whole granules (the ring's geometry, collective/machinery/ring_geometry.hpp), and
// the encoded bytes of each piece. A ring of up to 2 (n-1) hops takes
// steps() wire steps (one phase: `ex.phase(geometry.steps(), ...)`).
template <class Codec>
class segmented_partition : public collective::ring_geometry {
 public:
  segmented_partition(const Codec& codec, std::size_t count, int ranks, std::size_t segment_elements,
                      std::uint64_t max_steps)
      : ring_geometry(count, ranks, segment_elements, 2 * static_cast<std::size_t>(std::max(ranks - 1, 0)), max_steps,
                      codec.granule()),
        codec_(codec),
        blocks_(codec, count, ranks) {}

  const encoded_partition<Codec>& blocks() const { return blocks_; }

  // Granule-aligned ranges encode to a contiguous range of the whole encoding.
  std::size_t encoded_size(range r) const {
    return codec_.encoded_bytes(r.offset + r.count) - codec_.encoded_bytes(r.offset);
  }
  std::span<std::byte> encoded(std::span<std::byte> whole, range r) const {
    return whole.subspan(codec_.encoded_bytes(r.offset), encoded_size(r));
  }

 private:
  const Codec& codec_;
  encoded_partition<Codec> blocks_;
};

}  // namespace chorus::compressed
