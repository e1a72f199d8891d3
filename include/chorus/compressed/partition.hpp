// How the compressed collectives cut a tensor: one block per rank along the
// codec's granule (whole codec blocks), so that each block's encoding is a
// contiguous byte range of the whole tensor's encoding; and, for pipelined
// rings, each block into segments of whole granules.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/collective/blocks.hpp>
#include <chorus/comm/tag.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace chorus::compressed {

template <class Codec>
class encoded_partition {
 public:
  encoded_partition(const Codec& codec, std::size_t count, int parts)
      : codec_(codec), count_(count), units_{(count + codec.granule() - 1) / codec.granule(), static_cast<std::size_t>(parts)} {}

  std::size_t offset(int part) const { return std::min(count_, units_.offset(index(part)) * codec_.granule()); }
  std::size_t size(int part) const { return offset(part + 1) - offset(part); }
  std::size_t byte_offset(int part) const { return codec_.encoded_bytes(offset(part)); }
  std::size_t bytes(int part) const { return codec_.encoded_bytes(offset(part + 1)) - byte_offset(part); }
  std::size_t total_bytes() const { return codec_.encoded_bytes(count_); }

 private:
  static std::size_t index(int part) { return static_cast<std::size_t>(part); }

  const Codec& codec_;
  std::size_t count_;
  collective::block_partition units_;
};

// Elements [offset, offset + count) of the tensor.
struct range {
  std::size_t offset = 0, count = 0;
};

// One block per rank, each cut into segments of whole granules, and the index
// of (hop, segment) among the steps() wire steps a ring of up to 2 (n-1) hops
// reserves (one phase: `ex.phase(geometry.steps(), ...)`, reserved first).
template <class Codec>
class segmented_partition {
 public:
  segmented_partition(const Codec& codec, std::size_t count, int ranks, std::size_t segment_elements)
      : codec_(codec), blocks_(codec, count, ranks), ranks_(ranks) {
    const std::size_t granule = codec.granule();
    hops_ = std::max<std::size_t>(1, 2 * static_cast<std::size_t>(ranks - 1));
    const std::size_t most_segments = std::max<std::size_t>(1, (std::size_t{tag::max_step} + 1) / hops_);
    std::size_t largest = 0;
    for (int b = 0; b < ranks; ++b) largest = std::max(largest, blocks_.size(b));
    segment_ = std::max({segment_elements, (largest + most_segments - 1) / most_segments, std::size_t{1}});
    segment_ = (segment_ + granule - 1) / granule * granule;
    segments_per_block_ = std::max<std::size_t>(1, (largest + segment_ - 1) / segment_);
  }

  const encoded_partition<Codec>& blocks() const { return blocks_; }
  std::size_t segment() const { return segment_; }
  std::size_t segments_per_block() const { return segments_per_block_; }
  int block_of(int b) const { return ((b % ranks_) + ranks_) % ranks_; }

  std::size_t pieces(int block) const { return (blocks_.size(block) + segment_ - 1) / segment_; }
  range piece(int block, std::size_t k) const {
    const std::size_t begin = std::min(k * segment_, blocks_.size(block));
    return {blocks_.offset(block) + begin, std::min(segment_, blocks_.size(block) - begin)};
  }
  range whole(int block) const { return {blocks_.offset(block), blocks_.size(block)}; }

  // Granule-aligned ranges encode to a contiguous range of the whole encoding.
  std::size_t encoded_size(range r) const {
    return codec_.encoded_bytes(r.offset + r.count) - codec_.encoded_bytes(r.offset);
  }
  std::span<std::byte> encoded(std::span<std::byte> whole, range r) const {
    return whole.subspan(codec_.encoded_bytes(r.offset), encoded_size(r));
  }
  std::size_t step(std::size_t hop, std::size_t k) const { return hop * segments_per_block_ + k; }
  std::size_t steps() const { return hops_ * segments_per_block_; }

 private:
  const Codec& codec_;
  encoded_partition<Codec> blocks_;
  int ranks_;
  std::size_t hops_ = 1, segment_ = 1, segments_per_block_ = 1;
};

}  // namespace chorus::compressed
