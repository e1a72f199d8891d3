// How a compressed collective cuts a tensor into one part per rank: along
// the codec's granule (whole blocks), so that each part's encoding is a
// contiguous byte range of the whole tensor's encoding.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/collective/blocks.hpp>

#include <algorithm>
#include <cstddef>

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

}  // namespace chorus::compressed
