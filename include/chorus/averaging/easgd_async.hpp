// Asynchronous EASGD (Zhang, Choromanska, LeCun 2015): the centre c lives on
// a server rank (which also trains). Every tau local steps a worker pulls
// elastically, without any global barrier:
//   d = alpha (x_i - c);   x_i <- x_i - d;   c <- c + d   (at the server)
// The worker sends x_i, the server applies d to c and answers with d, so
// both sides use the same bits. The server answers from the communicator's
// progress thread while its own trainer computes; its own pulls take the
// centre's lock directly. The model to keep is the centre: finish() (which
// waits for every worker's last pull) broadcasts it into every rank's
// parameters.
//
// Cost per pull: 2 alpha + 2 S beta for the worker; the server carries
// (n-1) S beta of traffic every tau steps, the limit of the scheme at scale.
// A dead worker or server becomes a chorus::error (peer failure or timeout)
// at the next pull or at finish(), never a hang.
#pragma once

#include <chorus/averaging/easgd.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/collective/broadcast.hpp>
#include <chorus/comm/progress_thread.hpp>
#include <chorus/core/error.hpp>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace chorus::averaging {

struct easgd_async_options {
  double alpha = 0.05;    // elastic force eta * rho
  std::uint64_t tau = 4;  // local steps between pulls
  int server = 0;         // the rank that holds the centre
};

template <class Communicator>
class easgd_async : public scheme_base<easgd_async<Communicator>> {
 public:
  using request = typename Communicator::request;

  // Collective: every rank starts from the server's model, the centre's
  // first value.
  easgd_async(Communicator& comm, parameters model, easgd_async_options options = {})
      : comm_(comm.split(0, comm.rank())), model_(std::move(model)), options_(options),
        elements_(model_.size()), message_(elements_ + 1) {
    require_elastic(options_.alpha, options_.tau, "easgd_async");
    if (options_.server < 0 || options_.server >= comm_.size())
      throw error(errc::invalid_argument, "easgd_async: server rank " + std::to_string(options_.server) +
                                              " is not in [0, " + std::to_string(comm_.size()) + ")");
    std::vector<float> start = model_.snapshot();
    this->metered([&] { broadcast(comm_, std::span<float>(start), options_.server); });
    model_.copy_from(start);
    if (is_server()) start_serving(std::move(start));
  }

  ~easgd_async() { serving_.release(); }

  bool is_server() const noexcept { return comm_.rank() == options_.server; }

  // The trainer thread's traffic plus, on the server, the replies its
  // progress thread has sent and the pulls it has merged.
  averaging_stats stats() const noexcept {
    averaging_stats total = this->stats_;
    total.bytes_sent += served_bytes_.load(std::memory_order_relaxed);
    total.messages_sent += served_messages_.load(std::memory_order_relaxed);
    total.merges += merges_.load(std::memory_order_relaxed);
    return total;
  }

  void end_step() {
    this->count_step();
    if (this->stats_.steps % options_.tau == 0) pull();
  }

  // Collective. Every worker reports its last pull done; the server waits for
  // all of them (bounded by the timeout), then the centre goes to everyone.
  void finish() {
    std::vector<float> centre(elements_);
    if (is_server()) {
      wait_for_workers();
      serving_.release();  // the progress thread no longer touches the centre
      centre = centre_;
    } else {
      message_.assign(elements_ + 1, 0.0f);
      message_[elements_] = done_kind;
      this->metered([&] { comm_.send(std::span<const float>(message_), options_.server, request_tag); });
    }
    this->metered([&] { broadcast(comm_, std::span<float>(centre), options_.server); });
    model_.copy_from(centre);
  }

  // The server's copy of the centre (empty on workers); stable after finish().
  std::span<const float> centre() const noexcept { return centre_; }
  // A consistent copy of it while workers may be pulling (for evaluation).
  std::vector<float> centre_snapshot() {
    std::lock_guard lock(centre_mutex_);
    return centre_;
  }

 private:
  static constexpr int request_tag = 1;
  static constexpr int reply_tag = 2;
  static constexpr float pull_kind = 0.0f;
  static constexpr float done_kind = 1.0f;

  struct worker_slot {
    std::vector<float> incoming;
    std::vector<float> reply;
    request receive;
    request answer;
    bool done = false;
  };

  void pull() {
    model_.copy_to(std::span<float>(message_).first(elements_));
    message_[elements_] = pull_kind;
    if (is_server()) {
      pull_locally();
    } else {
      reply_.resize(elements_);
      this->metered([&] {
        std::array<request, 2> round_trip{comm_.irecv(std::span(reply_), options_.server, reply_tag),
                                          comm_.isend(std::span<const float>(message_), options_.server, request_tag)};
        comm_.wait_all(round_trip, "easgd_async pull");
        comm_.expect_bytes(round_trip[0], reply_.size() * sizeof(float), "easgd_async pull");
      });
      subtract(reply_);
    }
    ++this->stats_.exchanges;
  }

  void pull_locally() {
    std::lock_guard lock(centre_mutex_);
    elastic_difference(std::span<const float>(message_).first(elements_), reply_);
    subtract(reply_);
  }

  // d = alpha (x - c); c += d. Caller holds centre_mutex_.
  void elastic_difference(std::span<const float> x, std::vector<float>& d) {
    const auto alpha = static_cast<float>(options_.alpha);
    d.resize(elements_);
    for (std::size_t k = 0; k < elements_; ++k) {
      d[k] = alpha * (x[k] - centre_[k]);
      centre_[k] += d[k];
    }
    ++merges_;
  }

  void subtract(std::span<const float> d) {
    model_.for_each_part(d, [](std::span<float> tensor, std::span<const float> part) {
      for (std::size_t k = 0; k < tensor.size(); ++k) tensor[k] -= part[k];
    });
  }

  // --- server side: runs on the progress thread ------------------------------
  void start_serving(std::vector<float> centre) {
    centre_ = std::move(centre);
    workers_.resize(static_cast<std::size_t>(comm_.size()));
    for (int w = 0; w < comm_.size(); ++w)
      if (w != options_.server) post(w);
    workers_left_ = comm_.size() - 1;
    if (workers_left_ > 0) serving_ = comm_.progress_thread().add([this] { return serve(); });
  }

  void post(int w) {
    worker_slot& slot = workers_[static_cast<std::size_t>(w)];
    slot.incoming.resize(elements_ + 1);
    slot.receive = comm_.irecv(std::span(slot.incoming), w, request_tag);
  }

  bool serve() {
    bool worked = false;
    for (int w = 0; w < comm_.size(); ++w) {
      worker_slot& slot = workers_[static_cast<std::size_t>(w)];
      if (w == options_.server || slot.done || !comm_.test(slot.receive)) continue;
      comm_.expect_bytes(slot.receive, slot.incoming.size() * sizeof(float), "easgd_async serve");
      worked = true;
      if (slot.incoming[elements_] == done_kind) {
        slot.done = true;
        std::lock_guard lock(centre_mutex_);
        --workers_left_;
        workers_done_.notify_all();
        continue;
      }
      comm_.wait(slot.answer, "easgd_async reply");  // the previous reply left long ago
      {
        std::lock_guard lock(centre_mutex_);
        elastic_difference(std::span<const float>(slot.incoming).first(elements_), slot.reply);
      }
      const traffic before = this_thread_traffic();
      slot.answer = comm_.isend(std::span<const float>(slot.reply), w, reply_tag);
      const traffic sent = this_thread_traffic() - before;
      served_bytes_.fetch_add(sent.bytes_sent, std::memory_order_relaxed);
      served_messages_.fetch_add(sent.messages_sent, std::memory_order_relaxed);
      post(w);
    }
    return worked;
  }

  void wait_for_workers() {
    const auto deadline = std::chrono::steady_clock::now() + comm_.timeout();
    std::unique_lock lock(centre_mutex_);
    while (workers_left_ > 0) {
      lock.unlock();
      serving_.rethrow_if_failed();
      lock.lock();
      if (workers_done_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(20)),
                                   [&] { return workers_left_ == 0; }))
        break;
      if (std::chrono::steady_clock::now() >= deadline) {
        comm_.transport().abandon();
        throw error(errc::timeout, std::to_string(workers_left_) + " worker(s) did not finish within the timeout",
                    {comm_.world_rank(comm_.rank()), -1, "easgd_async finish"});
      }
    }
  }

  Communicator comm_;
  parameters model_;
  easgd_async_options options_;
  std::size_t elements_;
  std::vector<float> message_;  // x, then the kind
  std::vector<float> reply_;
  // Server only.
  std::vector<float> centre_;
  std::vector<worker_slot> workers_;
  std::mutex centre_mutex_;
  std::condition_variable workers_done_;
  int workers_left_ = 0;
  std::atomic<std::uint64_t> merges_{0};
  std::atomic<std::uint64_t> served_bytes_{0};
  std::atomic<std::uint64_t> served_messages_{0};
  progress_thread::registration serving_;
};

}  // namespace chorus::averaging
