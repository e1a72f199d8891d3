// Opening the rendezvous store over TCP: host one (rank 0 of a job started
// by a cluster launcher, chorus-run, run_threads) or join one.
//
// Linked with chorus::runtime (which defines CHORUS_SEPARATE_RUNTIME), this
// header only declares: the Boost.Asio code is compiled once, in the
// library, and a file that calls init() does not parse Asio. Header-only
// (chorus::chorus alone), the definitions follow inline and every file that
// includes this header compiles Asio; see the README, "Compile time".
#pragma once

#include <chorus/bootstrap/store.hpp>

#include <memory>

#if defined(CHORUS_SEPARATE_RUNTIME)
#define CHORUS_RUNTIME_API
#else
#define CHORUS_RUNTIME_API inline
#endif

namespace chorus::store {

// Serves a store on its own thread until the returned object is destroyed.
CHORUS_RUNTIME_API std::unique_ptr<host> host_store(server_options options);

// Connects (retrying until the timeout: the host may start later) and
// authenticates with the job's token.
CHORUS_RUNTIME_API std::unique_ptr<connection> join_store(client_options options);

// A store joined on its first request, not before: under PMIx start-up
// needs none (comm/connect.hpp), and only what needs a job-wide key-value
// store later (a communicator id for split, an NCCL id, a joiner) connects
// to rank 0's. Leaving one never joined does nothing.
class joined_on_first_use final : public connection {
 public:
  explicit joined_on_first_use(client_options options) : options_(std::move(options)) {}
  std::chrono::milliseconds timeout() const noexcept override { return options_.timeout; }
  void set(std::string_view key, std::string_view value) override { joined().set(key, value); }
  std::optional<std::string> get(std::string_view key) override { return joined().get(key); }
  std::string wait(std::string_view key, std::chrono::milliseconds timeout) override {
    return joined().wait(key, timeout);
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override { return joined().add(key, delta); }
  void join_as(int rank) override { joined().join_as(rank); }
  void leave() noexcept override {
    if (inner_) inner_->leave();
  }

 private:
  connection& joined() {
    if (!inner_) inner_ = join_store(options_);
    return *inner_;
  }
  client_options options_;
  std::unique_ptr<connection> inner_;
};

}  // namespace chorus::store

#if !defined(CHORUS_SEPARATE_RUNTIME)
#include <chorus/bootstrap/store_open_impl.hpp>
#endif
