// The rendezvous store's server: a key-value map over TCP (Boost.Asio) with
// set, get, wait-for-key (with timeout) and atomic add.
//
// It runs on its own thread. Rank 0 hosts it in jobs started by a cluster
// launcher; chorus-run and the in-process thread helper host it themselves.
// It binds to loopback unless told otherwise. A client must open with HELLO
// carrying the job's token within `hello_timeout`; protocol violations are
// answered with an ERROR frame and the connection is closed, and the server
// goes on serving everyone else.
#pragma once

#include <chorus/bootstrap/store_protocol.hpp>
#include <chorus/core/error.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <charconv>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace chorus::store {

struct server_options {
  std::string bind_host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port
  std::string token;
  store::limits limits;
  std::chrono::milliseconds hello_timeout{10000};
};

// Compares without an early exit so response timing does not leak the token.
inline bool same_token(std::string_view expected, std::string_view offered) noexcept {
  unsigned char difference = expected.size() == offered.size() ? 0 : 1;
  for (std::size_t i = 0; i < offered.size(); ++i)
    difference |= static_cast<unsigned char>(offered[i] ^ expected[i % (expected.size() + 1)]);
  return difference == 0;
}

class server {
 public:
  explicit server(server_options options)
      : options_(std::move(options)), acceptor_(io_), work_(io_.get_executor()) {
    listen();
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }

  server(const server&) = delete;
  server& operator=(const server&) = delete;

  ~server() { stop(); }

  std::uint16_t port() const noexcept { return port_; }
  const std::string& host() const noexcept { return options_.bind_host; }
  std::string address() const { return options_.bind_host + ":" + std::to_string(port_); }

  int connected_clients() const noexcept { return clients_.load(); }

  // Waits until every client has disconnected (or the timeout passes), so a
  // hosting rank does not pull the store from under slower ranks.
  bool wait_until_no_clients(std::chrono::milliseconds timeout) {
    std::unique_lock lock(clients_mutex_);
    return clients_changed_.wait_for(lock, timeout, [this] { return clients_.load() == 0; });
  }

  void stop() {
    if (!thread_.joinable()) return;
    io_.stop();
    thread_.join();
  }

 private:
  class session;
  using tcp = boost::asio::ip::tcp;

  void listen() {
    try {
      tcp::resolver resolver(io_);
      const auto endpoints = resolver.resolve(options_.bind_host, std::to_string(options_.port),
                                              tcp::resolver::passive);
      const tcp::endpoint endpoint = *endpoints.begin();
      acceptor_.open(endpoint.protocol());
      acceptor_.set_option(tcp::acceptor::reuse_address(true));
      acceptor_.bind(endpoint);
      acceptor_.listen();
      port_ = acceptor_.local_endpoint().port();
    } catch (const boost::system::system_error& failure) {
      throw error(errc::transport,
                  "store cannot listen on " + options_.bind_host + ":" +
                      std::to_string(options_.port) + ": " + failure.what(),
                  {-1, -1, "store server"});
    }
  }

  inline void accept();

  void client_joined() { ++clients_; }
  void client_left() {
    {
      std::lock_guard lock(clients_mutex_);
      --clients_;
    }
    clients_changed_.notify_all();
  }

  // Sessions touch these until the io_context destroys them, so they are
  // declared before it and outlive it.
  server_options options_;
  std::unordered_map<std::string, std::string> values_;  // io thread only
  std::unordered_map<std::string, std::vector<std::weak_ptr<session>>> waiters_;
  std::atomic<int> clients_{0};
  std::mutex clients_mutex_;
  std::condition_variable clients_changed_;
  std::uint16_t port_ = 0;
  boost::asio::io_context io_;
  tcp::acceptor acceptor_;
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

class server::session : public std::enable_shared_from_this<session> {
 public:
  session(server& owner, tcp::socket socket)
      : owner_(owner), socket_(std::move(socket)), hello_timer_(owner.io_), wait_timer_(owner.io_) {
    owner_.client_joined();
  }
  ~session() { owner_.client_left(); }

  void start() {
    hello_timer_.expires_after(owner_.options_.hello_timeout);
    hello_timer_.async_wait([self = shared_from_this()](boost::system::error_code failure) {
      if (!failure && !self->greeted_) self->close();
    });
    read_header();
  }

  // Called by the server when a key this session waits on is set.
  void deliver(const std::string& key, const std::string& value) {
    if (!waiting_ || waiting_key_ != key) return;
    waiting_ = false;
    wait_timer_.cancel();
    reply(frame_writer(opcode::reply_value).put_string(value));
  }

 private:
  void read_header() {
    boost::asio::async_read(
        socket_, boost::asio::buffer(header_),
        [self = shared_from_this()](boost::system::error_code failure, std::size_t) {
          if (failure) return self->close();
          const std::uint32_t length = read_u32(self->header_);
          const std::uint32_t limit = self->owner_.options_.limits.max_frame_bytes();
          if (length == 0) return self->refuse("malformed frame: empty body");
          if (length > limit)
            return self->refuse("frame of " + std::to_string(length) +
                                " bytes exceeds the limit of " + std::to_string(limit));
          self->body_.resize(length);
          self->read_body();
        });
  }

  void read_body() {
    boost::asio::async_read(
        socket_, boost::asio::buffer(body_),
        [self = shared_from_this()](boost::system::error_code failure, std::size_t) {
          if (failure) return self->close();
          try {
            self->handle();
          } catch (const protocol_error& problem) {
            self->refuse(problem.detail());
          }
        });
  }

  void handle() {
    frame_reader frame(body_);
    const opcode code = frame.code();
    if (!greeted_ && code != opcode::hello) throw protocol_error("expected HELLO first");
    const limits& limit = owner_.options_.limits;
    switch (code) {
      case opcode::hello: return handle_hello(frame);
      case opcode::set: {
        std::string key = frame.string(limit.max_key_bytes, "key");
        std::string value = frame.string(limit.max_value_bytes, "value");
        frame.expect_end();
        store(std::move(key), std::move(value));
        return reply(frame_writer(opcode::reply_ok));
      }
      case opcode::get: {
        const std::string key = frame.string(limit.max_key_bytes, "key");
        frame.expect_end();
        const auto found = owner_.values_.find(key);
        if (found == owner_.values_.end()) return reply(frame_writer(opcode::reply_missing));
        return reply(frame_writer(opcode::reply_value).put_string(found->second));
      }
      case opcode::wait: {
        std::string key = frame.string(limit.max_key_bytes, "key");
        const std::uint64_t timeout_ms = frame.u64();
        frame.expect_end();
        return handle_wait(std::move(key), timeout_ms);
      }
      case opcode::add: {
        std::string key = frame.string(limit.max_key_bytes, "key");
        const auto delta = static_cast<std::int64_t>(frame.u64());
        frame.expect_end();
        return handle_add(std::move(key), delta);
      }
      default:
        throw protocol_error("unknown opcode " + std::to_string(static_cast<int>(code)));
    }
  }

  void handle_hello(frame_reader& frame) {
    const std::uint32_t version = frame.u32();
    const std::string token = frame.string(owner_.options_.limits.max_value_bytes, "token");
    frame.expect_end();
    if (greeted_) throw protocol_error("HELLO sent twice");
    if (version != protocol_version)
      throw protocol_error("protocol version " + std::to_string(version) + " is not " +
                           std::to_string(protocol_version));
    if (!same_token(owner_.options_.token, token))
      throw protocol_error("bad token: this store belongs to another job (check CHORUS_TOKEN)");
    greeted_ = true;
    hello_timer_.cancel();
    reply(frame_writer(opcode::reply_ok));
  }

  void handle_wait(std::string key, std::uint64_t timeout_ms) {
    const auto found = owner_.values_.find(key);
    if (found != owner_.values_.end())
      return reply(frame_writer(opcode::reply_value).put_string(found->second));
    waiting_ = true;
    waiting_key_ = key;
    owner_.waiters_[std::move(key)].push_back(weak_from_this());
    wait_timer_.expires_after(std::chrono::milliseconds(std::min<std::uint64_t>(timeout_ms, 1ull << 40)));
    wait_timer_.async_wait([self = shared_from_this()](boost::system::error_code failure) {
      if (failure || !self->waiting_) return;
      self->waiting_ = false;
      self->reply(frame_writer(opcode::reply_timeout));
    });
  }

  void handle_add(std::string key, std::int64_t delta) {
    std::int64_t value = 0;
    const auto found = owner_.values_.find(key);
    if (found != owner_.values_.end()) {
      const std::string& text = found->second;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (ec != std::errc() || end != text.data() + text.size())
        throw protocol_error("ADD on key '" + key + "' whose value is not an integer");
    }
    value += delta;
    store(std::move(key), std::to_string(value));
    reply(frame_writer(opcode::reply_integer).put_u64(static_cast<std::uint64_t>(value)));
  }

  void store(std::string key, std::string value) {
    const auto waiting = owner_.waiters_.find(key);
    if (waiting != owner_.waiters_.end()) {
      auto sessions = std::move(waiting->second);
      owner_.waiters_.erase(waiting);
      for (auto& weak : sessions)
        if (auto other = weak.lock()) other->deliver(key, value);
    }
    owner_.values_[std::move(key)] = std::move(value);
  }

  void reply(const frame_writer& frame) { send(frame.finish(), false); }

  void refuse(const std::string& reason) {
    send(frame_writer(opcode::reply_error).put_string(reason).finish(), true);
  }

  void send(std::vector<std::byte> frame, bool then_close) {
    reply_ = std::move(frame);
    boost::asio::async_write(
        socket_, boost::asio::buffer(reply_),
        [self = shared_from_this(), then_close](boost::system::error_code failure, std::size_t) {
          if (failure || then_close) return self->close();
          self->read_header();
        });
  }

  void close() {
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    hello_timer_.cancel();
    wait_timer_.cancel();
  }

  server& owner_;
  tcp::socket socket_;
  boost::asio::steady_timer hello_timer_;
  boost::asio::steady_timer wait_timer_;
  std::array<std::byte, 4> header_{};
  std::vector<std::byte> body_;
  std::vector<std::byte> reply_;
  bool greeted_ = false;
  bool waiting_ = false;
  std::string waiting_key_;
};

inline void server::accept() {
  acceptor_.async_accept([this](boost::system::error_code failure, tcp::socket socket) {
    if (failure) return;  // stopping
    std::make_shared<session>(*this, std::move(socket))->start();
    accept();
  });
}

}  // namespace chorus::store
