// The Codec concept: how a tensor of float becomes bytes on the wire and back.
//
//   c.encoded_bytes(n)        bytes that n elements encode to
//   c.granule()               elements per independent unit (a block's size
//                             for block codecs, 1 otherwise): a tensor cut at
//                             multiples of it encodes to the concatenation of
//                             its parts' encodings (not for sparse codecs,
//                             below: they choose across the whole tensor)
//   c.encode(values, bytes)   values: span<const float>, bytes: span<std::byte>
//   c.decode(bytes, values)   values = decoded
//   c.decode_add(bytes, acc)  acc += decoded, fused (no temporary tensor)
//   c.error_bound(values, b)  b[i] bounds |decode(encode(values))[i] - values[i]|
//   C::name                   "fp16", "int8", ... for logs and tools
//
// Every codec decodes the same bytes to the same bits on every machine and
// on every code path (vectorised or portable), which is what lets a
// compressed allreduce leave all ranks with identical results.
#pragma once

#include <chorus/core/error.hpp>

#include <charconv>
#include <concepts>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>
#include <system_error>

namespace chorus::codec {

template <class C>
concept codec = requires(const C& c, std::span<const float> in, std::span<float> out, std::span<std::byte> bytes,
                         std::span<const std::byte> encoded, std::size_t n) {
  { C::name } -> std::convertible_to<std::string_view>;
  { c.encoded_bytes(n) } -> std::same_as<std::size_t>;
  { c.granule() } -> std::same_as<std::size_t>;
  c.encode(in, bytes);
  c.decode(encoded, out);
  c.decode_add(encoded, out);
  c.error_bound(in, out);
};

// Lossy codecs with a narrow range (fp16) want their inputs scaled down
// before a sum is encoded; see compressed/compressed_allreduce.hpp.
template <class C>
inline constexpr bool limited_range = false;

// Codecs whose error is relative to each value (fp16, bf16) or zero may
// re-encode partial sums hop by hop, as a ring allreduce does, for an error
// that grows with the hops only as their rounding does. Block codecs (int8,
// onebit) scale by a block's largest value, so every re-encoding adds an
// error of the whole block's size: they encode each contribution once.
template <class C>
inline constexpr bool reencodes_well = false;

// Sparsifying codecs (topk, randomk) send a subset of the elements and
// choose it across the whole tensor, so a tensor is never cut for them: the
// compressed allreduce runs its sparse scheme (compressed/compressed_allreduce_sparse.hpp)
// instead of the ring or encode-once ones. sparse_indices_agree: every rank
// picks the same indices on the same call (randomk's shared seed), so the
// kept values can be summed as they are.
template <class C>
inline constexpr bool sparse = false;
template <class C>
inline constexpr bool sparse_indices_agree = false;

namespace detail {

// A number in a codec's name ("topk:0.05" -> 0.05); `what` names it for the error.
template <class Number>
Number parse_setting(std::string_view text, std::string_view whole, std::string_view what) {
  Number value{};
  const auto [end, failed] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (failed != std::errc{} || end != text.data() + text.size())
    throw error(errc::invalid_argument,
                "codec '" + std::string(whole) + "': '" + std::string(text) + "' is not a " + std::string(what));
  return value;
}

inline void require_sizes(std::string_view codec_name, const char* operation, std::size_t elements,
                          std::size_t expected_bytes, std::size_t given_bytes) {
  if (expected_bytes != given_bytes)
    throw error(errc::invalid_argument, std::string(codec_name) + " " + operation + ": " + std::to_string(elements) +
                                            " elements take " + std::to_string(expected_bytes) +
                                            " bytes, the buffer has " + std::to_string(given_bytes));
}

}  // namespace detail

}  // namespace chorus::codec
