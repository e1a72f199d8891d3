// nccl::host_adapter: the adapter interface (nccl/adapter.hpp) over
// chorus's own communicator, on host memory. It stands in for NCCL where
// there is no GPU, so that everything above the NCCL calls (bootstrap, the
// bounded wait and abort, error mapping, the grouped send/recv plans, the
// schemes on an NCCL communicator) runs in the tests, with results compared
// to plain serial references.
//
// Like NCCL: each NCCL communicator is its own group of ranks (a split of
// the one it is made from), a failed call leaves the communicator failed
// (check() reports it, later calls do nothing), and sends and receives
// between group_start() and group_end() are posted together. Unlike NCCL:
// each call runs to completion when it is made (the stream is not used), and
// avg is chorus's (sum, then divide) rather than a premultiplied sum.
#pragma once

#include <chorus/collective/allgather/allgather.hpp>
#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/collective/broadcast/broadcast.hpp>
#include <chorus/collective/reduce/reduce.hpp>
#include <chorus/collective/reduce_scatter/reduce_scatter.hpp>
#include <chorus/nccl/adapter.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace chorus::nccl {

struct host_adapter_options {
  int devices = 1;
  // Which memory goes through the adapter (default: all of it; a test can
  // leave some to the host communicator, as NCCL leaves host memory).
  std::function<bool(const void*)> moves{};
  // The host address of a buffer the adapter moves (a fake device's alias;
  // default: the buffer itself).
  std::function<void*(const void*)> address{};
  // Called with the stream before each call runs, so that the call comes
  // after the work already on it, as NCCL's kernels do (a fake device's
  // synchronize; default: nothing).
  std::function<void(stream_handle)> after_stream{};
};

namespace detail {

// Calls f(Op{}) with chorus's operator for `op`.
template <class F>
void visit_reduction(reduction op, F&& f) {
  switch (op) {
    case reduction::sum: return f(op::sum{});
    case reduction::prod: return f(op::prod{});
    case reduction::max: return f(op::max{});
    case reduction::min: return f(op::min{});
    case reduction::avg: return f(op::avg{});
  }
}

class host_endpoint final : public endpoint {
 public:
  host_endpoint(chorus::communicator own, host_adapter_options given)
      : comm_(std::move(own)), given_(std::move(given)) {}

  void all_reduce(const void* send, void* recv, std::size_t count, dtype type, reduction op,
                  stream_handle stream) override {
    typed(stream, type, [&]<class T>(T*) {
      visit_reduction(op, [&](auto o) { chorus::allreduce(comm_, in<T>(send, count), out<T>(recv, count), o); });
    });
  }
  void broadcast(const void* send, void* recv, std::size_t count, dtype type, int root, stream_handle stream) override {
    typed(stream, type, [&]<class T>(T*) {
      if (comm_.rank() == root && send != recv)
        std::copy_n(in<T>(send, count).data(), count, out<T>(recv, count).data());
      chorus::broadcast(comm_, out<T>(recv, count), root);
    });
  }
  void reduce(const void* send, void* recv, std::size_t count, dtype type, reduction op, int root,
              stream_handle stream) override {
    typed(stream, type, [&]<class T>(T*) {
      const std::span<T> result = comm_.rank() == root ? out<T>(recv, count) : std::span<T>();
      visit_reduction(op, [&](auto o) { chorus::reduce(comm_, in<T>(send, count), result, root, o); });
    });
  }
  void all_gather(const void* send, void* recv, std::size_t count, dtype type, stream_handle stream) override {
    typed(stream, type, [&]<class T>(T*) {
      const std::span<T> all = out<T>(recv, count * ranks());
      // NCCL's in-place form: the send buffer is this rank's block of the output.
      if (in<T>(send, count).data() == all.data() + count * static_cast<std::size_t>(comm_.rank()))
        chorus::allgather(comm_, all);
      else
        chorus::allgather(comm_, in<T>(send, count), all);
    });
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, dtype type, reduction op,
                      stream_handle stream) override {
    typed(stream, type, [&]<class T>(T*) {
      visit_reduction(
          op, [&](auto o) { chorus::reduce_scatter(comm_, in<T>(send, count * ranks()), out<T>(recv, count), o); });
    });
  }

  void send(const void* data, std::size_t count, dtype type, int peer, stream_handle stream) override {
    post({data, count * size_of(type), peer, true}, stream);
  }
  void recv(void* data, std::size_t count, dtype type, int peer, stream_handle stream) override {
    post({data, count * size_of(type), peer, false}, stream);
  }
  void group_start() override { ++depth_; }
  void group_end() override {
    if (depth_ == 0) return fail(error(errc::invalid_argument, "group_end() without group_start()"));
    if (--depth_ == 0) flush();
  }

  health check() override {
    if (!failure_) return {};
    return {result_of(failure_->category()), failure_->what(), failure_->category()};
  }
  bool stream_idle(stream_handle stream) override {
    if (given_.after_stream) given_.after_stream(stream);
    return true;
  }
  void finalize() override {}
  void abort() noexcept override {
    if (!failure_) failure_ = error(errc::peer_failure, "aborted");
  }

 private:
  struct transfer {
    const void* data;
    std::size_t bytes;
    int peer;
    bool sending;
  };

  int ranks() const noexcept { return comm_.size(); }
  void* host_address(const void* data) const {
    return given_.address && data != nullptr ? given_.address(data) : const_cast<void*>(data);
  }
  template <class T>
  std::span<const T> in(const void* data, std::size_t count) const {
    return {static_cast<const T*>(host_address(data)), count};
  }
  template <class T>
  std::span<T> out(void* data, std::size_t count) const {
    return {static_cast<T*>(host_address(data)), count};
  }

  // Runs call(T*) for the element type after the stream's work, unless the
  // communicator has failed; an error is kept for check(), as NCCL keeps
  // its asynchronous error.
  template <class Call>
  void typed(stream_handle stream, dtype type, Call&& call) {
    attempt([&] {
      if (given_.after_stream) given_.after_stream(stream);
      visit_element_type(type, [&](auto element) { call(static_cast<decltype(element)*>(nullptr)); });
    });
  }
  template <class Work>
  void attempt(Work&& work) {
    if (failure_) return;
    try {
      work();
    } catch (const error& failed) {
      fail(failed);
    }
  }
  void fail(const error& failed) {
    if (!failure_) failure_ = failed;
  }

  // A send or receive outside a group is a group of one.
  void post(const transfer& one, stream_handle stream) {
    pending_.push_back(one);
    stream_ = stream;
    if (depth_ == 0) flush();
  }
  void flush() {
    attempt([&] {
      if (given_.after_stream) given_.after_stream(stream_);
      std::vector<chorus::communicator::request> requests;
      for (const transfer& t : pending_) {
        auto* bytes = static_cast<std::byte*>(host_address(t.data));
        if (t.sending)
          requests.push_back(comm_.isend(std::span<const std::byte>(bytes, t.bytes), t.peer));
        else
          requests.push_back(comm_.irecv(std::span<std::byte>(bytes, t.bytes), t.peer));
      }
      comm_.wait_all(std::span(requests), "nccl group");
      for (std::size_t k = 0; k < pending_.size(); ++k)
        if (!pending_[k].sending) comm_.expect_bytes(requests[k], pending_[k].bytes, "nccl recv");
    });
    pending_.clear();
  }

  static result result_of(errc category) noexcept {
    switch (category) {
      case errc::peer_failure:
      case errc::timeout: return result::remote_error;
      case errc::invalid_argument:
      case errc::mismatch: return result::invalid_usage;
      case errc::unavailable: return result::unhandled_cuda_error;
      default: return result::system_error;
    }
  }

  chorus::communicator comm_;
  host_adapter_options given_;
  std::vector<transfer> pending_;
  stream_handle stream_ = nullptr;
  int depth_ = 0;
  std::optional<error> failure_;
};

}  // namespace detail

class host_adapter final : public adapter {
 public:
  explicit host_adapter(host_adapter_options given = {}) : given_(std::move(given)) {}

  std::string name() const override { return "host adapter (chorus over UCX)"; }
  int devices() override { return given_.devices; }

  // Distinct per call, so that a rank handed another group's id is caught
  // by connect()'s check.
  unique_id new_id() override {
    unique_id id{};
    const auto stamp = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    for (std::size_t k = 0; k < sizeof stamp; ++k) id[k] = static_cast<std::byte>(stamp >> (8 * k));
    id[8] = static_cast<std::byte>(++made_);
    return id;
  }

  // Collective over `group`: its own split (so its tags meet no one
  // else's), then every rank checks that all were given the same id, as
  // NCCL's bootstrap would fail if they were not.
  std::unique_ptr<endpoint> connect(chorus::communicator& group, const unique_id& id, int device) override {
    if (device < 0 || device >= given_.devices)
      throw error(errc::invalid_argument,
                  "host adapter: device " + std::to_string(device) + " of " + std::to_string(given_.devices));
    chorus::communicator own = group.split(0, group.rank());
    std::vector<std::uint8_t> everyone(id.size() * static_cast<std::size_t>(own.size()));
    std::vector<std::uint8_t> mine(id.size());
    std::memcpy(mine.data(), id.data(), id.size());
    chorus::allgather(own, std::span<const std::uint8_t>(mine), std::span(everyone));
    if (!std::equal(everyone.begin(), everyone.end() - static_cast<std::ptrdiff_t>(id.size()),
                    everyone.begin() + static_cast<std::ptrdiff_t>(id.size())))
      throw error(errc::mismatch, "ranks were given different NCCL unique ids",
                  {own.transport().rank(), 0, "nccl connect"});
    return std::make_unique<detail::host_endpoint>(std::move(own), given_);
  }

  bool moves(const void* pointer) const noexcept override { return !given_.moves || given_.moves(pointer); }

 private:
  host_adapter_options given_;
  unsigned made_ = 0;
};

}  // namespace chorus::nccl
