// How a ring cuts a buffer: one block per rank (block_partition's split,
// in whole granules), each block cut into segments, and the wire-tag step
// of every (hop, segment) message.
//
// A ring of `hops` hops sends each block's segments once per hop, so it needs
// hops x segments_per_block steps, all inside one phase of the call
// (comm/tag.hpp). Segments therefore grow until they fit the steps left: at
// 37 ranks and 64 MiB the 256 KiB default becomes about 1 MiB. Segments are
// whole multiples of `granule` elements (a codec's block), so a segment of a
// granule-aligned block encodes to a contiguous byte range.
#pragma once

#include <chorus/collective/machinery/block_partition.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace chorus::collective {

// Elements [offset, offset + count) of a buffer.
struct range {
  std::size_t offset = 0, count = 0;
};

// The one pair of knobs every ring shares (plain and compressed).
struct ring_settings {
  std::size_t segment_bytes = 256u << 10;  // of the buffer's elements, before any encoding
  std::size_t depth = 4;                   // segment receives in flight
};

class ring_geometry {
 public:
  // `count` elements in `ranks` blocks of whole granules whose sizes differ
  // by at most one granule (the last block takes what is left of a partial
  // one); `max_steps` is what the ring's phase may take.
  ring_geometry(std::size_t count, int ranks, std::size_t segment, std::size_t hops, std::uint64_t max_steps,
                std::size_t granule = 1)
      : count_(count),
        granule_(granule),
        ranks_(ranks),
        hops_(std::max<std::size_t>(1, hops)),
        units_{(count + granule - 1) / granule, static_cast<std::size_t>(ranks)} {
    const std::size_t largest = whole(0).count;  // the first block is never smaller
    const std::size_t most_segments = std::max<std::size_t>(1, static_cast<std::size_t>(max_steps / hops_));
    segment_ = std::max(std::max(segment, (largest + most_segments - 1) / most_segments), std::size_t{1});
    segment_ = (segment_ + granule - 1) / granule * granule;
    segments_per_block_ = std::max<std::size_t>(1, (largest + segment_ - 1) / segment_);
  }

  int ranks() const noexcept { return ranks_; }
  int block_of(int b) const noexcept { return ((b % ranks_) + ranks_) % ranks_; }
  range whole(int block) const noexcept {
    const std::size_t first = offset(block), last = offset(block + 1);
    return {first, last - first};
  }

  std::size_t segment() const noexcept { return segment_; }
  std::size_t segments_per_block() const noexcept { return segments_per_block_; }
  std::size_t pieces(int block) const noexcept { return (whole(block).count + segment_ - 1) / segment_; }
  range piece(int block, std::size_t k) const noexcept {
    const range all = whole(block);
    const std::size_t begin = std::min(k * segment_, all.count);
    return {all.offset + begin, std::min(segment_, all.count - begin)};
  }

  // Index of (hop, segment) among the steps() the ring's phase reserves.
  std::size_t step(std::size_t hop, std::size_t k) const noexcept { return hop * segments_per_block_ + k; }
  std::size_t steps() const noexcept { return hops_ * segments_per_block_; }

 private:
  std::size_t offset(int block) const noexcept {
    return std::min(count_, units_.offset(static_cast<std::size_t>(block)) * granule_);
  }

  std::size_t count_, granule_;
  int ranks_;
  std::size_t hops_;
  block_partition units_;  // granules per block
  std::size_t segment_ = 1, segments_per_block_ = 1;
};

}  // namespace chorus::collective
