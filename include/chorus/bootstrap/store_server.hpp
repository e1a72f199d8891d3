// The rendezvous store's server: a key-value map over TCP (Boost.Asio) with
// set, get, wait-for-key (with timeout) and atomic add.
//
// It runs on its own thread. Rank 0 hosts it in jobs started by a cluster
// launcher; chorus-run and the in-process thread helper host it themselves.
// It binds to loopback unless told otherwise. A client must open with HELLO
// carrying the job's token within `hello_timeout`; protocol violations are
// answered with an ERROR frame and the connection is closed, and the server
// goes on serving everyone else. The protocol itself lives in
// store_session.hpp; this file moves bytes and runs timers:
// - every session always has a read outstanding, so a client that closes
//   (even one waiting on a key) ends its session at once; a rank's session
//   that ends without LEAVE answers every pending WAIT with its failure
//   (store_protocol.hpp) there and then;
// - a frame that stops arriving for `frame_timeout` closes the session;
// - accept errors (EMFILE, ENFILE, ...) are logged once and retried with a
//   back-off, never the end of accepting.
#pragma once

#include <chorus/bootstrap/store_session.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/log.hpp>

#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

namespace chorus::store {

class server final : public host {
 public:
  explicit server(server_options options) : options_(std::move(options)), acceptor_(io_), work_(io_.get_executor()) {
    listen();
    accept();
    thread_ = std::thread([this] { io_.run(); });
  }

  server(const server&) = delete;
  server& operator=(const server&) = delete;

  ~server() override { stop(); }

  std::uint16_t port() const noexcept override { return port_; }
  const std::string& host() const noexcept { return options_.bind_host; }
  std::string address() const override { return options_.bind_host + ":" + std::to_string(port_); }

  int connected_clients() const noexcept { return clients_.load(); }
  // How many accepts failed (EMFILE and the like) and were retried.
  std::size_t accept_errors() const noexcept { return accept_errors_.load(); }

  bool wait_until_no_clients(std::chrono::milliseconds timeout) override {
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
      const auto endpoints =
          resolver.resolve(options_.bind_host, std::to_string(options_.port), tcp::resolver::passive);
      const tcp::endpoint endpoint = *endpoints.begin();
      acceptor_.open(endpoint.protocol());
      acceptor_.set_option(tcp::acceptor::reuse_address(true));
      acceptor_.bind(endpoint);
      acceptor_.listen();
      port_ = acceptor_.local_endpoint().port();
    } catch (const boost::system::system_error& failure) {
      throw error(
          errc::transport,
          "store cannot listen on " + options_.bind_host + ":" + std::to_string(options_.port) + ": " + failure.what(),
          {options_.rank, -1, "store server"});
    }
  }

  inline void accept();
  inline void accept_later(const boost::system::error_code& failure);

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
  store::table table_;                                               // io thread only
  std::unordered_map<session_id, std::weak_ptr<session>> sessions_;  // io thread only
  session_id last_session_ = 0;
  std::atomic<int> clients_{0};
  std::mutex clients_mutex_;
  std::condition_variable clients_changed_;
  std::uint16_t port_ = 0;
  std::chrono::milliseconds accept_backoff_{0};
  std::atomic<std::size_t> accept_errors_{0};
  boost::asio::io_context io_;
  tcp::acceptor acceptor_;
  boost::asio::steady_timer accept_timer_{io_};
  boost::asio::executor_work_guard<boost::asio::io_context::executor_type> work_;
  std::thread thread_;
};

class server::session : public std::enable_shared_from_this<session> {
 public:
  session(server& owner, tcp::socket socket, session_id id)
      : owner_(owner),
        socket_(std::move(socket)),
        protocol_(owner.table_, owner.options_, id),
        hello_timer_(owner.io_),
        wait_timer_(owner.io_),
        frame_timer_(owner.io_) {
    owner_.client_joined();
  }
  ~session() {
    owner_.sessions_.erase(protocol_.id());
    owner_.client_left();
  }

  void start() {
    owner_.sessions_[protocol_.id()] = weak_from_this();
    hello_timer_.expires_after(owner_.options_.hello_timeout);
    hello_timer_.async_wait([self = shared_from_this()](boost::system::error_code failure) {
      if (!failure && !self->protocol_.greeted()) self->close();
    });
    read();
  }

  // Called when a key this session may wait on is set.
  void deliver(const std::string& key, const std::string& value) { answer_wait(protocol_.deliver(key, value)); }

  // Called when a rank failed while this session may wait.
  void deliver_failure() { answer_wait(protocol_.deliver_failure()); }

 private:
  void answer_wait(std::vector<std::byte> reply) {
    if (reply.empty()) return;
    wait_timer_.cancel();
    send(std::move(reply), false);
  }

  // Answers the WAITs of the sessions a rank's failure ends.
  void deliver_failures(const std::vector<session_id>& waiting) {
    for (session_id other : waiting) {
      const auto found = owner_.sessions_.find(other);
      if (found == owner_.sessions_.end()) continue;
      if (auto waiting_session = found->second.lock()) waiting_session->deliver_failure();
    }
  }

  void read() {
    socket_.async_read_some(boost::asio::buffer(incoming_),
                            [self = shared_from_this()](boost::system::error_code failure, std::size_t count) {
                              if (failure) return self->close();
                              self->apply(self->protocol_.feed(std::span(self->incoming_).first(count)));
                              if (!self->protocol_.closed()) self->read();
                            });
  }

  void apply(session_protocol::effects effects) {
    for (session_id woken : effects.woken) {
      const auto found = owner_.sessions_.find(woken);
      if (found == owner_.sessions_.end()) continue;
      if (auto other = found->second.lock())
        if (const std::string* value = owner_.table_.find(effects.woken_key)) other->deliver(effects.woken_key, *value);
    }
    if (effects.start_wait) {
      wait_timer_.expires_after(*effects.start_wait);
      wait_timer_.async_wait([self = shared_from_this()](boost::system::error_code failure) {
        if (failure) return;
        std::vector<std::byte> reply = self->protocol_.wait_expired();
        if (!reply.empty()) self->send(std::move(reply), false);
      });
    }
    deliver_failures(effects.failed_waits);
    if (!effects.send.empty() || effects.close) send(std::move(effects.send), effects.close);
    arm_frame_timer();
  }

  // A partial frame must keep arriving: each read restarts the clock.
  void arm_frame_timer() {
    if (!protocol_.partial() || protocol_.closed()) {
      frame_timer_.cancel();
      return;
    }
    frame_timer_.expires_after(owner_.options_.frame_timeout);
    frame_timer_.async_wait([self = shared_from_this()](boost::system::error_code failure) {
      if (!failure && self->protocol_.partial()) self->close();
    });
  }

  // Replies go out in order, one write at a time.
  void send(std::vector<std::byte> bytes, bool then_close) {
    if (!bytes.empty()) outbox_.push_back(std::move(bytes));
    close_after_send_ = close_after_send_ || then_close;
    if (!writing_) write_next();
  }

  void write_next() {
    if (outbox_.empty()) {
      if (close_after_send_) close();
      return;
    }
    writing_ = true;
    boost::asio::async_write(socket_, boost::asio::buffer(outbox_.front()),
                             [self = shared_from_this()](boost::system::error_code failure, std::size_t) {
                               self->writing_ = false;
                               self->outbox_.pop_front();
                               if (failure) return self->close();
                               self->write_next();
                             });
  }

  void close() {
    deliver_failures(protocol_.end());
    boost::system::error_code ignored;
    socket_.shutdown(tcp::socket::shutdown_both, ignored);
    socket_.close(ignored);
    hello_timer_.cancel();
    wait_timer_.cancel();
    frame_timer_.cancel();
  }

  server& owner_;
  tcp::socket socket_;
  session_protocol protocol_;
  boost::asio::steady_timer hello_timer_;
  boost::asio::steady_timer wait_timer_;
  boost::asio::steady_timer frame_timer_;
  std::array<std::byte, 64 * 1024> incoming_{};
  std::deque<std::vector<std::byte>> outbox_;
  bool writing_ = false;
  bool close_after_send_ = false;
};

inline void server::accept() {
  acceptor_.async_accept([this](boost::system::error_code failure, tcp::socket socket) {
    if (failure == boost::asio::error::operation_aborted || !acceptor_.is_open()) return;  // stopping
    if (failure) return accept_later(failure);
    accept_backoff_ = std::chrono::milliseconds(0);
    std::make_shared<session>(*this, std::move(socket), ++last_session_)->start();
    accept();
  });
}

// Out of descriptors or another transient failure: try again soon, so the
// store serves again once connections close (logged once per streak).
inline void server::accept_later(const boost::system::error_code& failure) {
  ++accept_errors_;
  if (accept_backoff_.count() == 0)
    log::warn(options_.rank, "store: accept failed (" + failure.message() + "); retrying");
  accept_backoff_ = std::clamp(accept_backoff_ * 2, std::chrono::milliseconds(10), std::chrono::milliseconds(500));
  accept_timer_.expires_after(accept_backoff_);
  accept_timer_.async_wait([this](boost::system::error_code stopped) {
    if (!stopped) accept();
  });
}

}  // namespace chorus::store
