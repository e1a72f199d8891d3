// The rendezvous store's server logic without sockets: the table of values
// and waiters, and one connection's protocol as a state machine that is fed
// the bytes as they arrive and says what to send back. The Asio server
// (store_server.hpp) only moves bytes and runs timers; the fuzz target
// (tests/fuzz/) feeds this logic arbitrary byte streams directly.
//
// Defences against hostile or broken clients, each tested:
// - before HELLO a frame may be at most `limits.max_hello_bytes()` long (a
//   HELLO is tiny): an unauthenticated peer cannot make the server allocate
//   the 16 MiB a SET may carry;
// - a frame's body is stored as its bytes arrive, never allocated up front
//   from the length it declares;
// - a byte that arrives while a WAIT is pending is a protocol error (the
//   client protocol is strictly one request, one reply), and the server
//   keeps reading while waiting, so a client that closes ends its session;
// - ADD on a non-integer or past the int64 range is an error frame;
// - a rank may JOIN once per store: a second connection claiming it is
//   refused (two processes started with one CHORUS_RANK).
#pragma once

#include <chorus/bootstrap/store.hpp>
#include <chorus/bootstrap/store_protocol.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace chorus::store {

// Compares without an early exit so response timing does not leak the token.
inline bool same_token(std::string_view expected, std::string_view offered) noexcept {
  unsigned char difference = expected.size() == offered.size() ? 0 : 1;
  for (std::size_t i = 0; i < offered.size(); ++i)
    difference |= static_cast<unsigned char>(offered[i] ^ expected[i % (expected.size() + 1)]);
  return difference == 0;
}

using session_id = std::uint64_t;

// A rank whose connection closed without LEAVE (store_protocol.hpp).
struct rank_failure {
  std::uint32_t rank = 0;
  std::string reason;
};

// Values and waiters, shared by every session of one server (one thread).
class table {
 public:
  const std::string* find(const std::string& key) const {
    const auto found = values_.find(key);
    return found == values_.end() ? nullptr : &found->second;
  }

  // Stores the value; returns the sessions that waited for this key.
  std::vector<session_id> set(std::string key, std::string value) {
    std::vector<session_id> woken;
    const auto waiting = waiters_.find(key);
    if (waiting != waiters_.end()) {
      woken.assign(waiting->second.begin(), waiting->second.end());
      waiters_.erase(waiting);
    }
    values_[std::move(key)] = std::move(value);
    return woken;
  }

  // value += delta, checked; returns the new value and who waited for the key.
  std::pair<std::int64_t, std::vector<session_id>> add(std::string key, std::int64_t delta) {
    std::int64_t value = 0;
    if (const std::string* text = find(key)) {
      const auto [end, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
      if (ec != std::errc() || end != text->data() + text->size())
        throw protocol_error("ADD on key '" + key + "' whose value is not an integer");
    }
    std::int64_t sum = 0;
    if (__builtin_add_overflow(value, delta, &sum))
      throw protocol_error("ADD of " + std::to_string(delta) + " to key '" + key + "' (" + std::to_string(value) +
                           ") overflows a 64-bit integer");
    return {sum, set(std::move(key), std::to_string(sum))};
  }

  void wait_for(const std::string& key, session_id who) { waiters_[key].insert(who); }
  void forget(const std::string& key, session_id who) {
    const auto waiting = waiters_.find(key);
    if (waiting == waiters_.end()) return;
    waiting->second.erase(who);
    if (waiting->second.empty()) waiters_.erase(waiting);
  }
  std::size_t waiting_keys() const noexcept { return waiters_.size(); }

  // False if the rank has joined already.
  bool join(std::uint32_t rank) { return joined_.insert(rank).second; }

  // The rank failed: it is recorded (the first failure is the one every
  // later WAIT reports), and every pending WAIT is dropped; returns their
  // sessions, to be answered with the failure.
  std::vector<session_id> fail(std::uint32_t rank, std::string reason) {
    if (!failure_) failure_ = rank_failure{rank, std::move(reason)};
    std::vector<session_id> waiting;
    for (const auto& [key, sessions] : waiters_) waiting.insert(waiting.end(), sessions.begin(), sessions.end());
    waiters_.clear();
    return waiting;
  }
  const std::optional<rank_failure>& failure() const noexcept { return failure_; }

 private:
  std::unordered_map<std::string, std::string> values_;
  std::map<std::string, std::set<session_id>> waiters_;
  std::set<std::uint32_t> joined_;
  std::optional<rank_failure> failure_;
};

// One connection's protocol. feed() returns what to do next.
class session_protocol {
 public:
  struct effects {
    std::vector<std::byte> send;                          // reply frames, in order
    bool close = false;                                   // close once `send` is written
    std::optional<std::chrono::milliseconds> start_wait;  // a WAIT is now pending: arm its timer
    std::vector<session_id> woken;                        // sessions whose WAIT the key just stored answers
    std::string woken_key;
    std::vector<session_id> failed_waits;  // sessions whose WAIT a rank's failure answers (table().failure())
  };

  session_protocol(table& values, const server_options& options, session_id id)
      : table_(values), options_(options), id_(id) {}
  session_protocol(const session_protocol&) = delete;
  session_protocol& operator=(const session_protocol&) = delete;
  ~session_protocol() { stop_waiting(); }

  session_id id() const noexcept { return id_; }
  bool greeted() const noexcept { return greeted_; }
  bool waiting() const noexcept { return waiting_.has_value(); }
  bool closed() const noexcept { return closed_; }
  // Part of a frame has arrived and the rest has not.
  bool partial() const noexcept { return !buffer_.empty(); }

  effects feed(std::span<const std::byte> bytes) {
    effects out;
    if (closed_) return out;
    if (waiting_ && !bytes.empty()) {
      refuse(out, "a request arrived while a WAIT was pending (one request at a time)");
      return out;
    }
    while (!bytes.empty() && !closed_ && !waiting_) {
      const std::size_t taken = take(bytes);
      bytes = bytes.subspan(taken);
      if (buffer_.size() == header_bytes && !acceptable_header(out)) break;
      if (frame_complete()) handle_frame(out);
    }
    if (!bytes.empty() && !closed_) refuse(out, "a request arrived while a WAIT was pending (one request at a time)");
    return out;
  }

  // The key this session waits on was set: the reply, if it still waits.
  std::vector<std::byte> deliver(const std::string& key, const std::string& value) {
    if (!waiting_ || *waiting_ != key) return {};
    waiting_.reset();
    return frame_writer(opcode::reply_value).put_string(value).finish();
  }

  // A rank failed (table::failure()): the reply, if this session still waits.
  std::vector<std::byte> deliver_failure() {
    if (!waiting_ || !table_.failure()) return {};
    waiting_.reset();  // the table dropped its waiters already
    return failure_frame().finish();
  }

  // The WAIT's timer fired: the reply, if it still waits.
  std::vector<std::byte> wait_expired() {
    if (!waiting_) return {};
    stop_waiting();
    return frame_writer(opcode::reply_timeout).finish();
  }

  // The connection is gone (or about to be closed by the server). A joined
  // rank that did not LEAVE has failed: returns the sessions whose WAIT
  // that answers (deliver_failure()).
  std::vector<session_id> end() {
    stop_waiting();
    if (closed_) return {};
    closed_ = true;
    if (!joined_ || left_) return {};
    return table_.fail(*joined_, "rank " + std::to_string(*joined_) +
                                     " closed its connection to the store without leaving the job (its process "
                                     "died, or failed before the job was complete)");
  }

 private:
  static constexpr std::size_t header_bytes = 4;

  std::uint32_t frame_limit() const noexcept {
    return greeted_ ? options_.limits.max_frame_bytes() : options_.limits.max_hello_bytes();
  }

  // Moves bytes of the current frame into the buffer: the header first, then
  // as much of the body as it declared. Returns how many were taken.
  std::size_t take(std::span<const std::byte> bytes) {
    std::size_t wanted = header_bytes;
    if (buffer_.size() >= header_bytes) wanted += body_length_;
    const std::size_t count = std::min(bytes.size(), wanted - buffer_.size());
    buffer_.insert(buffer_.end(), bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(count));
    if (buffer_.size() == header_bytes && body_length_ == 0)
      body_length_ = read_u32(std::span<const std::byte, 4>(buffer_.data(), 4));
    return count;
  }

  bool frame_complete() const noexcept {
    return buffer_.size() >= header_bytes && buffer_.size() == header_bytes + body_length_;
  }

  // Checked once the four length bytes are in, before any of the body is kept.
  bool acceptable_header(effects& out) {
    if (body_length_ == 0)
      refuse(out, "malformed frame: empty body");
    else if (body_length_ > frame_limit())
      refuse(out, "frame of " + std::to_string(body_length_) + " bytes exceeds the limit of " +
                      std::to_string(frame_limit()) + (greeted_ ? "" : " before HELLO"));
    return !closed_;
  }

  void handle_frame(effects& out) {
    const std::vector<std::byte> body(buffer_.begin() + header_bytes, buffer_.end());
    buffer_.clear();
    body_length_ = 0;
    try {
      handle(body, out);
    } catch (const protocol_error& problem) {
      refuse(out, problem.detail());
    }
  }

  void handle(std::span<const std::byte> body, effects& out) {
    frame_reader frame(body);
    const opcode code = frame.code();
    if (!greeted_ && code != opcode::hello) throw protocol_error("expected HELLO first");
    const limits& limit = options_.limits;
    switch (code) {
      case opcode::hello: return handle_hello(frame, out);
      case opcode::set: {
        std::string key = frame.string(limit.max_key_bytes, "key");
        std::string value = frame.string(limit.max_value_bytes, "value");
        frame.expect_end();
        out.woken_key = key;
        out.woken = table_.set(std::move(key), std::move(value));
        return reply(out, frame_writer(opcode::reply_ok));
      }
      case opcode::get: {
        const std::string key = frame.string(limit.max_key_bytes, "key");
        frame.expect_end();
        if (const std::string* value = table_.find(key))
          return reply(out, frame_writer(opcode::reply_value).put_string(*value));
        return reply(out, frame_writer(opcode::reply_missing));
      }
      case opcode::wait: {
        std::string key = frame.string(limit.max_key_bytes, "key");
        const std::uint64_t timeout_ms = frame.u64();
        frame.expect_end();
        if (const std::string* value = table_.find(key))
          return reply(out, frame_writer(opcode::reply_value).put_string(*value));
        if (table_.failure()) return reply(out, failure_frame());  // it will never be set
        table_.wait_for(key, id_);
        waiting_ = std::move(key);
        out.start_wait = std::chrono::milliseconds(std::min<std::uint64_t>(timeout_ms, std::uint64_t{1} << 40));
        return;
      }
      case opcode::add: {
        std::string key = frame.string(limit.max_key_bytes, "key");
        const auto delta = static_cast<std::int64_t>(frame.u64());
        frame.expect_end();
        out.woken_key = key;
        auto [value, woken] = table_.add(std::move(key), delta);
        out.woken = std::move(woken);
        return reply(out, frame_writer(opcode::reply_integer).put_u64(static_cast<std::uint64_t>(value)));
      }
      case opcode::join: {
        const std::uint32_t rank = frame.u32();
        frame.expect_end();
        if (joined_) throw protocol_error("JOIN sent twice");
        if (!table_.join(rank))
          throw protocol_error("rank " + std::to_string(rank) +
                               " has joined this store already (two processes with the same rank?)");
        joined_ = rank;
        return reply(out, frame_writer(opcode::reply_ok));
      }
      case opcode::leave:
        frame.expect_end();
        left_ = true;
        return reply(out, frame_writer(opcode::reply_ok));
      default: throw protocol_error("unknown opcode " + std::to_string(static_cast<int>(code)));
    }
  }

  frame_writer failure_frame() const {
    const rank_failure& failed = *table_.failure();
    return std::move(frame_writer(opcode::reply_peer_failure).put_u32(failed.rank).put_string(failed.reason));
  }

  void handle_hello(frame_reader& frame, effects& out) {
    const std::uint32_t version = frame.u32();
    const std::string token = frame.string(options_.limits.max_token_bytes, "token");
    frame.expect_end();
    if (greeted_) throw protocol_error("HELLO sent twice");
    if (version != protocol_version)
      throw protocol_error("protocol version " + std::to_string(version) + " is not " +
                           std::to_string(protocol_version));
    if (!same_token(options_.token, token))
      throw protocol_error("bad token: this store belongs to another job (check CHORUS_TOKEN)");
    greeted_ = true;
    reply(out, frame_writer(opcode::reply_ok));
  }

  static void reply(effects& out, const frame_writer& frame) {
    const std::vector<std::byte> bytes = frame.finish();
    out.send.insert(out.send.end(), bytes.begin(), bytes.end());
  }

  void refuse(effects& out, const std::string& reason) {
    reply(out, frame_writer(opcode::reply_error).put_string(reason));
    out.close = true;
    out.failed_waits = end();
    buffer_.clear();
  }

  void stop_waiting() {
    if (waiting_) table_.forget(*waiting_, id_);
    waiting_.reset();
  }

  table& table_;
  const server_options& options_;
  session_id id_;
  std::vector<std::byte> buffer_;  // the current frame: header, then body as it arrives
  std::uint32_t body_length_ = 0;
  bool greeted_ = false;
  bool closed_ = false;
  std::optional<std::uint32_t> joined_;  // the rank this connection joined as
  bool left_ = false;
  std::optional<std::string> waiting_;  // the key of a pending WAIT
};

}  // namespace chorus::store
