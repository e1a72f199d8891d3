// The rendezvous store as the rest of chorus sees it: a joined store
// (set/get/wait/add) and a hosted one (its address, and waiting for the
// ranks to leave), as interfaces, plus the options that open them.
//
// This header has no Boost.Asio in it: the communicator holds a store
// through these interfaces, so a file that only runs collectives never
// parses Asio. The TCP implementation (store_client.hpp, store_server.hpp)
// is reached through store_open.hpp, by code that hosts or joins a store
// (init, chorus-run, run_threads).
#pragma once

#include <chorus/bootstrap/store_protocol.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

namespace chorus::store {

struct client_options {
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;
  std::string token;
  std::chrono::milliseconds timeout{180000};  // connect and each request
  store::limits limits;
  int rank = -1;  // named in errors
};

struct server_options {
  std::string bind_host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: any free port
  std::string token;
  store::limits limits;
  std::chrono::milliseconds hello_timeout{10000};
  // A frame that started arriving must go on arriving: no new byte of it
  // for this long closes the connection (a half-sent frame never wedges a session).
  std::chrono::milliseconds frame_timeout{10000};
  int rank = -1;  // named in errors
};

// A joined store. Every call is bounded by the connection's timeout; a lost
// store is errc::peer_failure, an absent key in wait() errc::timeout, or
// errc::peer_failure naming the rank when a rank that joined failed first.
class connection {
 public:
  virtual ~connection() = default;
  virtual std::chrono::milliseconds timeout() const noexcept = 0;
  virtual void set(std::string_view key, std::string_view value) = 0;
  virtual std::optional<std::string> get(std::string_view key) = 0;
  // Blocks until the key exists.
  virtual std::string wait(std::string_view key, std::chrono::milliseconds timeout) = 0;
  std::string wait(std::string_view key) { return wait(key, timeout()); }
  // Adds atomically and returns the new value (a missing key counts as 0).
  virtual std::int64_t add(std::string_view key, std::int64_t delta) = 0;
  // Declares this connection rank `rank`'s own: if it closes without
  // leave() (the process died, or failed during start-up), every wait in
  // the store fails at once with a peer_failure naming the rank.
  virtual void join_as(int rank) = 0;
  // The rank is done with the store and goes cleanly; bounded, never throws.
  virtual void leave() noexcept = 0;
};

// A joined store that several threads of a rank may use: one request at a
// time (the client is one connection, and a rank's first exchange with a
// peer may look its address up from a progress thread while the caller
// splits a communicator). A long wait is asked in slices of `wait_slice`
// (the server answers each at its own deadline), so it holds the others
// off for a slice at most, not for the whole wait.
class serialized final : public connection {
 public:
  explicit serialized(std::unique_ptr<connection> inner) : inner_(std::move(inner)) {}
  std::chrono::milliseconds timeout() const noexcept override { return inner_->timeout(); }
  void set(std::string_view key, std::string_view value) override {
    std::lock_guard lock(mutex_);
    inner_->set(key, value);
  }
  std::optional<std::string> get(std::string_view key) override {
    std::lock_guard lock(mutex_);
    return inner_->get(key);
  }
  static constexpr std::chrono::milliseconds wait_slice{100};

  std::string wait(std::string_view key, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      try {
        std::lock_guard lock(mutex_);
        return inner_->wait(key, std::clamp(left, std::chrono::milliseconds{0}, wait_slice));
      } catch (const error& failure) {
        if (failure.category() != errc::timeout) throw;
        if (left > wait_slice) continue;
        throw error(errc::timeout, "key did not appear within " + std::to_string(timeout.count()) + " ms",
                    {failure.rank(), failure.peer(), failure.operation()});
      }
    }
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    std::lock_guard lock(mutex_);
    return inner_->add(key, delta);
  }
  void join_as(int rank) override {
    std::lock_guard lock(mutex_);
    inner_->join_as(rank);
  }
  void leave() noexcept override {
    std::lock_guard lock(mutex_);
    inner_->leave();
  }

 private:
  std::unique_ptr<connection> inner_;
  std::mutex mutex_;
};

// A store this process serves, on its own thread, until destroyed.
class host {
 public:
  virtual ~host() = default;
  virtual std::string address() const = 0;
  virtual std::uint16_t port() const noexcept = 0;
  // Waits until every client has disconnected (or the timeout passes), so a
  // hosting rank does not pull the store from under slower ranks.
  virtual bool wait_until_no_clients(std::chrono::milliseconds timeout) = 0;
};

}  // namespace chorus::store
