// What the block codecs (int8, onebit) share: the tensor is cut into blocks
// of `block` elements (the last may be shorter), and each block is encoded as
// a small header followed by its payload, back to back. block_codec owns the
// layout, the size checks and the loops over blocks; a codec supplies only
// the work on one block.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/codec/simd_kernels.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>

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

// Derived: static name; encode_block(const float* x, n, std::byte* block) and
// decode_block<Accumulate>(const std::byte* block, float* out, n), where
// block points at the block's header.
template <class Derived, class Payload>
class block_codec {
 public:
  block_codec(std::size_t block, simd_path path)
      : path_(runnable(path)), layout_{layout::checked(block, Derived::name)} {}

  std::size_t encoded_bytes(std::size_t n) const { return layout_.encoded_bytes(n); }
  std::size_t granule() const { return layout_.block; }
  simd_path path() const { return path_; }

  void encode(std::span<const float> in, std::span<std::byte> out) const {
    require_sizes(Derived::name, "encode", in.size(), encoded_bytes(in.size()), out.size());
    layout_.for_each_block(in.size(), [&](std::size_t first, std::size_t n, std::size_t byte) {
      self().encode_block(in.data() + first, n, out.data() + byte);
    });
  }
  void decode(std::span<const std::byte> in, std::span<float> out) const { convert<false>(in, out, "decode"); }
  void decode_add(std::span<const std::byte> in, std::span<float> acc) const { convert<true>(in, acc, "decode_add"); }

 protected:
  using layout = block_layout<Payload>;

  // visit(first element, elements) for every block of an n-element tensor.
  template <class Visit>
  void for_each_block(std::size_t n, Visit&& visit) const {
    layout_.for_each_block(n, [&](std::size_t first, std::size_t elements, std::size_t) { visit(first, elements); });
  }

  simd_path path_;

 private:
  const Derived& self() const { return static_cast<const Derived&>(*this); }

  template <bool Accumulate>
  void convert(std::span<const std::byte> in, std::span<float> out, const char* operation) const {
    require_sizes(Derived::name, operation, out.size(), encoded_bytes(out.size()), in.size());
    layout_.for_each_block(out.size(), [&](std::size_t first, std::size_t n, std::size_t byte) {
      self().template decode_block<Accumulate>(in.data() + byte, out.data() + first, n);
    });
  }

  layout layout_;
};

}  // namespace chorus::codec::detail
