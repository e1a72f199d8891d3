// Wire format of the rendezvous key-value store.
//
// Every message is a frame: a 4-byte little-endian body length, then the
// body: one opcode byte and its fields. Strings are a 4-byte length and the
// bytes; integers are 8 bytes, little-endian. A connection opens with HELLO
// (protocol version and the job's token); anything else first, a wrong token,
// a frame over the limit, an unknown opcode, a short or over-long body are
// answered with ERROR naming the problem, and the connection is closed.
//
// A rank's own connection says JOIN (its rank) after HELLO and LEAVE when it
// is done. A joined connection that closes without LEAVE is the rank's
// failure (its process died, or failed during start-up): every WAIT pending
// then, and every later WAIT for a key that is not there, is answered with
// PEER_FAILURE naming the rank, instead of waiting out its timeout.
#pragma once

#include <chorus/core/error.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chorus::store {

inline constexpr std::uint32_t protocol_version = 1;

enum class opcode : std::uint8_t {
  hello = 1,
  set = 2,
  get = 3,
  wait = 4,
  add = 5,
  join = 6,
  leave = 7,
  reply_ok = 100,
  reply_value = 101,
  reply_missing = 102,
  reply_timeout = 103,
  reply_error = 104,
  reply_integer = 105,
  reply_peer_failure = 106,  // u32 rank, string reason
};

struct limits {
  std::uint32_t max_key_bytes = 1024;
  std::uint32_t max_value_bytes = 16u << 20;
  std::uint32_t max_token_bytes = 1024;
  // Largest HELLO: opcode, version, token. Before HELLO no larger frame is
  // read, so an unauthenticated peer cannot make the server allocate much.
  std::uint32_t max_hello_bytes() const noexcept { return 1 + 4 + 4 + max_token_bytes; }
  // Largest body any valid request can have: opcode, two length-prefixed
  // strings and an integer.
  std::uint32_t max_frame_bytes() const noexcept { return 1 + 4 + max_key_bytes + 4 + max_value_bytes + 8; }
};

// Raised for a frame that does not parse; the server answers it with ERROR.
struct protocol_error : error {
  explicit protocol_error(std::string detail) : error(errc::mismatch, std::move(detail), {-1, -1, "store protocol"}) {}
};

class frame_writer {
 public:
  // Four bytes of room for the length, then the opcode.
  explicit frame_writer(opcode code)
      : bytes_{std::byte{0}, std::byte{0}, std::byte{0}, std::byte{0}, static_cast<std::byte>(code)} {}

  frame_writer& put_u8(std::uint8_t value) {
    bytes_.push_back(static_cast<std::byte>(value));
    return *this;
  }
  frame_writer& put_u32(std::uint32_t value) { return put_little_endian(value, 4); }
  frame_writer& put_u64(std::uint64_t value) { return put_little_endian(value, 8); }
  frame_writer& put_string(std::string_view text) {
    put_u32(static_cast<std::uint32_t>(text.size()));
    const auto* data = reinterpret_cast<const std::byte*>(text.data());
    bytes_.insert(bytes_.end(), data, data + text.size());
    return *this;
  }

  // The finished frame, length prefix included: a copy of the writer's
  // bytes, or (a writer about to go) the bytes themselves.
  std::vector<std::byte> finish() const& {
    std::vector<std::byte> frame = bytes_;
    write_u32(frame.data(), static_cast<std::uint32_t>(frame.size() - 4));
    return frame;
  }
  std::vector<std::byte> finish() && {
    write_u32(bytes_.data(), static_cast<std::uint32_t>(bytes_.size() - 4));
    return std::move(bytes_);
  }

  static void write_u32(std::byte* out, std::uint32_t value) noexcept {
    for (int i = 0; i < 4; ++i) out[i] = static_cast<std::byte>(value >> (8 * i));
  }

 private:
  frame_writer& put_little_endian(std::uint64_t value, int width) {
    for (int i = 0; i < width; ++i) bytes_.push_back(static_cast<std::byte>(value >> (8 * i)));
    return *this;
  }

  std::vector<std::byte> bytes_;
};

inline std::uint32_t read_u32(std::span<const std::byte, 4> bytes) noexcept {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i) value |= std::to_integer<std::uint32_t>(bytes[static_cast<std::size_t>(i)]) << (8 * i);
  return value;
}

class frame_reader {
 public:
  explicit frame_reader(std::span<const std::byte> body) : body_(body) {}

  opcode code() { return static_cast<opcode>(take(1)[0]); }
  std::uint32_t u32() { return static_cast<std::uint32_t>(little_endian(4)); }
  std::uint64_t u64() { return little_endian(8); }
  std::string string(std::uint32_t max_bytes, std::string_view field) {
    const std::uint32_t length = u32();
    if (length > max_bytes)
      throw protocol_error(std::string(field) + " of " + std::to_string(length) + " bytes exceeds the limit of " +
                           std::to_string(max_bytes));
    const auto bytes = take(length);
    return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
  }
  void expect_end() const {
    if (offset_ != body_.size())
      throw protocol_error("malformed frame: " + std::to_string(body_.size() - offset_) + " unexpected trailing bytes");
  }

 private:
  std::span<const std::byte> take(std::size_t count) {
    if (body_.size() - offset_ < count) throw protocol_error("malformed frame: body too short");
    const auto bytes = body_.subspan(offset_, count);
    offset_ += count;
    return bytes;
  }
  std::uint64_t little_endian(std::size_t width) {
    const auto bytes = take(width);
    std::uint64_t value = 0;
    for (std::size_t i = 0; i < width; ++i) value |= std::to_integer<std::uint64_t>(bytes[i]) << (8 * i);
    return value;
  }

  std::span<const std::byte> body_;
  std::size_t offset_ = 0;
};

}  // namespace chorus::store
