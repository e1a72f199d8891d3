// The rendezvous store's client: blocking set/get/wait/add, each bounded by a
// timeout. Connecting retries until the deadline, because in a cluster job
// rank 0 may start its server after the other ranks are already up.
#pragma once

#include <chorus/bootstrap/store.hpp>
#include <chorus/bootstrap/store_protocol.hpp>
#include <chorus/core/error.hpp>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace chorus::store {

class client final : public connection {
 public:
  using connection::wait;
  explicit client(client_options options) : options_(std::move(options)), socket_(io_) {
    connect();
    hello();
  }

  client(const client&) = delete;
  client& operator=(const client&) = delete;

  std::chrono::milliseconds timeout() const noexcept override { return options_.timeout; }

  void set(std::string_view key, std::string_view value) override {
    check_key(key, "set");
    if (value.size() > options_.limits.max_value_bytes)
      throw error(errc::invalid_argument,
                  "value of " + std::to_string(value.size()) + " bytes exceeds the store limit of " +
                      std::to_string(options_.limits.max_value_bytes),
                  {options_.rank, -1, "store set '" + std::string(key) + "'"});
    expect(transact(frame_writer(opcode::set).put_string(key).put_string(value), options_.timeout, "set", key),
           opcode::reply_ok, "set", key);
  }

  std::optional<std::string> get(std::string_view key) override {
    check_key(key, "get");
    reply answer = transact(frame_writer(opcode::get).put_string(key), options_.timeout, "get", key);
    if (answer.code == opcode::reply_missing) return std::nullopt;
    expect(answer, opcode::reply_value, "get", key);
    return answer.text;
  }

  // Blocks until the key exists; a timeout error if it does not appear in time.
  std::string wait(std::string_view key, std::chrono::milliseconds timeout) override {
    check_key(key, "wait");
    const auto ms = static_cast<std::uint64_t>(timeout.count());
    // The server answers at its own deadline; ours only guards a dead server.
    reply answer = transact(frame_writer(opcode::wait).put_string(key).put_u64(ms), timeout + std::chrono::seconds(5),
                            "wait", key);
    if (answer.code == opcode::reply_timeout)
      throw error(errc::timeout, "key did not appear within " + std::to_string(timeout.count()) + " ms",
                  {options_.rank, -1, "store wait '" + std::string(key) + "'"});
    if (answer.code == opcode::reply_peer_failure)
      throw error(errc::peer_failure, answer.text,
                  {options_.rank, static_cast<int>(answer.integer), "store wait '" + std::string(key) + "'"});
    expect(answer, opcode::reply_value, "wait", key);
    return answer.text;
  }

  std::int64_t add(std::string_view key, std::int64_t delta) override {
    check_key(key, "add");
    reply answer = transact(frame_writer(opcode::add).put_string(key).put_u64(static_cast<std::uint64_t>(delta)),
                            options_.timeout, "add", key);
    expect(answer, opcode::reply_integer, "add", key);
    return answer.integer;
  }

  void join_as(int rank) override {
    if (rank < 0)
      throw error(errc::invalid_argument, "rank " + std::to_string(rank), {options_.rank, -1, "store join"});
    expect(transact(frame_writer(opcode::join).put_u32(static_cast<std::uint32_t>(rank)), options_.timeout, "join", ""),
           opcode::reply_ok, "join", "");
  }

  void leave() noexcept override {
    try {
      if (socket_.is_open())
        transact(frame_writer(opcode::leave), std::min<clock::duration>(options_.timeout, std::chrono::seconds(5)),
                 "leave", "");
    } catch (const error&) {
      // The store went first (its host finished): nobody is left to tell.
    }
  }

 private:
  using tcp = boost::asio::ip::tcp;
  using clock = std::chrono::steady_clock;

  struct reply {
    opcode code{};
    std::string text;
    std::int64_t integer = 0;
  };

  std::string where() const { return options_.host + ":" + std::to_string(options_.port); }

  void connect() {
    const auto deadline = clock::now() + options_.timeout;
    tcp::resolver resolver(io_);
    boost::system::error_code failure;
    const auto endpoints = resolver.resolve(options_.host, std::to_string(options_.port), failure);
    if (failure)
      throw error(errc::invalid_argument, "cannot resolve store host: " + failure.message(),
                  {options_.rank, -1, "store connect " + where()});
    auto pause = std::chrono::milliseconds(10);
    for (;;) {
      failure = boost::asio::error::would_block;
      boost::asio::async_connect(socket_, endpoints,
                                 [&](boost::system::error_code result, const tcp::endpoint&) { failure = result; });
      run_until_done(std::min<clock::duration>(deadline - clock::now(), std::chrono::seconds(2)));
      if (!failure) return;
      if (clock::now() + pause >= deadline)
        throw error(errc::timeout,
                    "no store answered within " + std::to_string(options_.timeout.count()) +
                        " ms (last error: " + failure.message() + ")",
                    {options_.rank, -1, "store connect " + where()});
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(200));
    }
  }

  void hello() {
    if (options_.token.size() > options_.limits.max_token_bytes)
      throw error(errc::invalid_argument,
                  "token of " + std::to_string(options_.token.size()) + " bytes exceeds the limit of " +
                      std::to_string(options_.limits.max_token_bytes) + " (CHORUS_TOKEN)",
                  {options_.rank, -1, "store connect " + where()});
    reply answer = transact(frame_writer(opcode::hello).put_u32(protocol_version).put_string(options_.token),
                            options_.timeout, "hello", "");
    expect(answer, opcode::reply_ok, "hello", "");
  }

  void check_key(std::string_view key, const char* operation) const {
    if (key.empty() || key.size() > options_.limits.max_key_bytes)
      throw error(errc::invalid_argument,
                  "key must have 1.." + std::to_string(options_.limits.max_key_bytes) + " bytes",
                  {options_.rank, -1, std::string("store ") + operation});
  }

  // Runs the io_context until the pending operations finish; on timeout the
  // socket is closed (cancelling them) and the connection is unusable.
  bool run_until_done(clock::duration timeout) {
    io_.restart();
    io_.run_for(std::max<clock::duration>(timeout, clock::duration::zero()));
    if (io_.stopped()) return true;
    boost::system::error_code ignored;
    socket_.close(ignored);
    io_.restart();
    io_.run();
    return false;
  }

  reply transact(const frame_writer& request, clock::duration timeout, const char* operation, std::string_view key) {
    const std::string context =
        std::string("store ") + operation + (key.empty() ? "" : " '" + std::string(key) + "'") + " at " + where();
    if (!socket_.is_open())
      throw error(errc::transport, "connection is closed after an earlier failure", {options_.rank, -1, context});
    const std::vector<std::byte> frame = request.finish();
    std::array<std::byte, 4> header{};
    std::vector<std::byte> body;
    boost::system::error_code failure = boost::asio::error::would_block;
    std::string protocol_problem;
    boost::asio::async_write(socket_, boost::asio::buffer(frame), [&](boost::system::error_code written, std::size_t) {
      if (written) {
        failure = written;
        return;
      }
      boost::asio::async_read(
          socket_, boost::asio::buffer(header), [&](boost::system::error_code header_read, std::size_t) {
            if (header_read) {
              failure = header_read;
              return;
            }
            const std::uint32_t length = read_u32(header);
            if (length == 0 || length > options_.limits.max_frame_bytes()) {
              protocol_problem = "reply frame of " + std::to_string(length) + " bytes is out of range";
              failure = boost::asio::error::message_size;
              return;
            }
            body.resize(length);
            boost::asio::async_read(socket_, boost::asio::buffer(body),
                                    [&](boost::system::error_code body_read, std::size_t) { failure = body_read; });
          });
    });
    if (!run_until_done(timeout))
      throw error(errc::timeout,
                  "no reply within " +
                      std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(timeout).count()) + " ms",
                  {options_.rank, -1, context});
    if (failure) {
      boost::system::error_code ignored;
      socket_.close(ignored);
      if (protocol_problem.empty() && lost_store(failure))
        throw error(errc::peer_failure,
                    "lost the connection to the store (" + failure.message() +
                        "): the process hosting it (rank 0, or the launcher) is gone",
                    {options_.rank, -1, context});
      throw error(errc::transport,
                  protocol_problem.empty() ? "connection failed: " + failure.message() : protocol_problem,
                  {options_.rank, -1, context});
    }
    return decode(body, context);
  }

  // The other end went away: the store's host died (or closed it on us).
  static bool lost_store(const boost::system::error_code& failure) {
    return failure == boost::asio::error::eof || failure == boost::asio::error::connection_reset ||
           failure == boost::asio::error::broken_pipe || failure == boost::asio::error::connection_aborted;
  }

  reply decode(const std::vector<std::byte>& body, const std::string& context) {
    try {
      frame_reader frame(body);
      reply answer;
      answer.code = frame.code();
      if (answer.code == opcode::reply_value || answer.code == opcode::reply_error)
        answer.text = frame.string(options_.limits.max_value_bytes, "value");
      else if (answer.code == opcode::reply_integer)
        answer.integer = static_cast<std::int64_t>(frame.u64());
      else if (answer.code == opcode::reply_peer_failure) {
        answer.integer = frame.u32();  // the rank
        answer.text = frame.string(options_.limits.max_value_bytes, "reason");
      }
      frame.expect_end();
      return answer;
    } catch (const protocol_error& problem) {
      boost::system::error_code ignored;
      socket_.close(ignored);
      throw error(errc::mismatch, "bad reply: " + problem.detail(), {options_.rank, -1, context});
    }
  }

  void expect(const reply& answer, opcode wanted, const char* operation, std::string_view key) {
    if (answer.code == wanted) return;
    const std::string context =
        std::string("store ") + operation + (key.empty() ? "" : " '" + std::string(key) + "'") + " at " + where();
    if (answer.code == opcode::reply_error) {
      boost::system::error_code ignored;
      socket_.close(ignored);
      throw error(errc::invalid_argument, "the store refused: " + answer.text, {options_.rank, -1, context});
    }
    throw error(errc::mismatch, "unexpected reply opcode " + std::to_string(static_cast<int>(answer.code)),
                {options_.rank, -1, context});
  }

  client_options options_;
  boost::asio::io_context io_;
  tcp::socket socket_;
};

}  // namespace chorus::store
