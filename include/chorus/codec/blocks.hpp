// Layout shared by the block codecs (int8, onebit): the tensor is cut into
// blocks of `block` elements (the last may be shorter), and each block is
// encoded as a small header followed by its payload, back to back.
#pragma once

#include <chorus/core/error.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace chorus::codec::detail {

// Payload: static header_bytes and payload_bytes(elements).
template <class Payload>
struct block_layout {
  std::size_t block;

  static std::size_t checked(std::size_t block, std::string_view codec_name) {
    if (block == 0 || block % 8 != 0)
      throw error(errc::invalid_argument, std::string(codec_name) + ": block size " + std::to_string(block) +
                                              " must be a positive multiple of 8");
    return block;
  }

  std::size_t bytes_for(std::size_t elements) const { return Payload::header_bytes + Payload::payload_bytes(elements); }

  std::size_t encoded_bytes(std::size_t n) const {
    const std::size_t rest = n % block;
    return (n / block) * bytes_for(block) + (rest ? bytes_for(rest) : 0);
  }

  // Calls visit(first element, elements, first byte) for every block.
  template <class Visit>
  void for_each_block(std::size_t n, Visit&& visit) const {
    std::size_t byte = 0;
    for (std::size_t first = 0; first < n; first += block) {
      const std::size_t elements = std::min(block, n - first);
      visit(first, elements, byte);
      byte += bytes_for(elements);
    }
  }
};

}  // namespace chorus::codec::detail
