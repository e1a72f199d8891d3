// Asynchronous EASGD (Zhang, Choromanska, LeCun 2015): the centre c lives on
// a server rank (which also trains). Every tau local steps a worker pulls
// elastically, without any global barrier:
//   d = alpha (x_i - c);   x_i <- x_i - d;   c <- c + d   (at the server)
// The worker sends x_i, the server applies d to c and answers with d, so
// both sides use the same bits. The server answers from the communicator's
// progress thread while its own trainer computes; its own pulls take the
// centre's lock directly. The model to keep is the centre: finish() (which
// waits for every worker's last pull) sends it to every worker, into every
// rank's parameters.
//
// Cost per pull: 2 alpha + 2 S beta for the worker; the server carries
// (n-1) S beta of traffic every tau steps, the limit of the scheme at scale.
// A dead worker or server becomes a chorus::error (peer failure or timeout)
// at the next pull or at finish(), never a hang. With on_peer_failure =
// continue_ (peer_loss.hpp) the server forgets a dead worker (its pulls so
// far stay in the centre) and finish() waits only for the live ones; the
// server's death stays an error on every worker: the centre has no copy.
//
// A worker (not the server) may leave() on purpose instead of finish(): a
// last elastic pull takes its latest steps into the centre, then a leaving
// message tells the server, which finishes without it.
//
// A process that joins the running job (CHORUS_JOIN; admission.hpp) and
// makes the same easgd_async becomes one more worker: the server admits it
// on its progress thread and welcomes it with the centre, its first model;
// finish() then waits for its goodbye too and sends it the centre.
//
// Messages are wire.hpp's: a worker's pulls are numbered from 1 and carry
// its step count; the reply carries the pull's number, and the goodbye
// (`done`) the number of pulls before it, so a lost, duplicated or foreign
// message is an error on the side that reads it.
#pragma once

#include <chorus/averaging/admission.hpp>
#include <chorus/averaging/easgd.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/peer_loss.hpp>
#include <chorus/averaging/roster.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/averaging/wire.hpp>
#include <chorus/collective/broadcast/broadcast.hpp>
#include <chorus/comm/progress_thread.hpp>
#include <chorus/core/error.hpp>

#include <array>
#include <atomic>
#include <concepts>
#include <cstdint>
#include <deque>
#include <mutex>
#include <span>
#include <string>
#include <vector>

namespace chorus::averaging {

struct easgd_async_options {
  double alpha = 0.05;                                               // elastic force eta * rho
  std::uint64_t tau = 4;                                             // local steps between pulls
  int server = 0;                                                    // the rank that holds the centre
  peer_failure_policy on_peer_failure = peer_failure_policy::raise;  // for dead workers
};

template <class Communicator>
class easgd_async : public scheme_base<easgd_async<Communicator>> {
 public:
  using request = typename Communicator::request;

  // Collective: every rank starts from the server's model, the centre's
  // first value. In a process that joined the running job: admission by
  // the server, starting from the centre as it is.
  // On an NCCL communicator: its host side (scheme.hpp, host_side).
  template <class Other>
    requires(!std::same_as<Other, Communicator> && std::same_as<host_side_t<Other>, Communicator>)
  easgd_async(Other& comm, parameters model, easgd_async_options options = {})
      : easgd_async(host_side<Other>::of(comm), std::move(model), std::move(options)) {}

  easgd_async(Communicator& comm, parameters model, easgd_async_options options = {})
      : comm_(comm.joined() ? admission::enter(comm, "easgd_async") : comm.split(0, comm.rank())),
        model_(std::move(model)),
        options_(options),
        elements_(model_.size()),
        bytes_(elements_ * sizeof(float)),
        message_(bytes_),
        reply_(bytes_),
        losses_(options_.on_peer_failure) {
    require_elastic(options_.alpha, options_.tau, "easgd_async");
    if (options_.server < 0 || options_.server >= comm_.size())
      throw error(errc::invalid_argument, "easgd_async: server rank " + std::to_string(options_.server) +
                                              " is not in [0, " + std::to_string(comm_.size()) + ")");
    if (comm.joined()) {
      join();
      return;
    }
    admission::open(comm_, "easgd_async");
    std::vector<float> start = model_.snapshot();
    this->metered(comm_, "easgd_async start", [&] { broadcast(comm_, std::span<float>(start), options_.server); });
    model_.copy_from(start);
    if (is_server()) start_serving(std::move(start));
  }

  ~easgd_async() { serving_.release(); }

  bool is_server() const noexcept { return comm_.rank() == options_.server; }
  // The workers the server went on without (on_peer_failure = continue_);
  // `step`: the pulls it had served in all when it noticed.
  std::vector<lost_peer> lost_peers() const { return losses_.list(); }

  // The trainer thread's traffic plus, on the server, the replies its
  // progress thread has sent and the pulls it has merged.
  averaging_stats stats() const noexcept {
    averaging_stats total = this->stats_;
    total.bytes_sent += served_bytes_.load(std::memory_order_relaxed);
    total.messages_sent += served_messages_.load(std::memory_order_relaxed);
    total.merges += merges_.load(std::memory_order_relaxed);
    return total;
  }

  // A pull waits only for the server's progress thread, never for another
  // rank's trainer: no open scheme can hold it up (comm/pending_merges.hpp).
  void end_step() {
    require_here("easgd_async step");
    this->count_step();
    if (this->stats_.steps % options_.tau == 0) pull();
  }

  // Leaves the job on purpose, between steps (instead of finish()): one
  // last pull, then goodbye. A worker only: the centre has no copy.
  void leave() {
    require_here("easgd_async leave");
    if (is_server())
      throw error(errc::invalid_argument, "easgd_async leave: this rank holds the centre, which no other rank has",
                  {comm_.world_rank(comm_.rank()), -1, "easgd_async leave"});
    pull();
    const auto goodbye = message_.write(wire::kind::leaving, pulls_, static_cast<double>(this->stats_.steps), 0);
    this->metered(comm_, "easgd_async leave", [&] { comm_.send(goodbye, options_.server, request_tag); });
    this->mark_left();
  }

  // Collective. Every worker says goodbye after its last pull; the server
  // serves the last pulls itself until every live worker has (bounded by
  // the timeout), then sends each the centre.
  void finish() {
    require_here("easgd_async finish");
    comm_.require_merged("easgd_async finish");  // it waits for every worker's last pull
    std::vector<float> centre(elements_);
    if (is_server()) {
      serving_.stop();  // from here on this thread serves, and alone touches the centre
      const auto all_gone = [&] {
        serve();
        return workers_.sending_count() == 0;
      };
      serving_comm_.progress_until(all_gone, "easgd_async finish, waiting for every worker's last pull and goodbye");
      centre = centre_;
      this->metered(comm_, "easgd_async finish", [&] { send_centre(centre); });
    } else {
      const auto goodbye = message_.write(wire::kind::done, pulls_, static_cast<double>(this->stats_.steps), 0);
      this->metered(comm_, "easgd_async finish", [&] {
        comm_.send(goodbye, options_.server, request_tag);
        comm_.recv(std::span<float>(centre), options_.server, centre_tag);
      });
    }
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
  static constexpr int centre_tag = 3;

  struct worker_slot {
    wire::message incoming;
    wire::message reply;
    request receive;
    request answer;
    std::uint64_t pulls = 0;  // served so far
    std::vector<float> welcome;
  };

  void require_here(const char* operation) const { this->require_not_left(operation, comm_.world_rank(comm_.rank())); }

  // A joiner: introduced to the server, it starts from the centre.
  void join() {
    std::vector<float> centre(elements_);
    this->metered(comm_, "easgd_async join", [&] {
      std::array<request, 1> welcomes{comm_.irecv(std::span(centre), options_.server, admission::welcome_tag)};
      admission::welcomed(comm_, std::span(welcomes), {options_.server},
                          "easgd_async join, waiting for the server's welcome");
      comm_.expect_bytes(welcomes[0], bytes_, "easgd_async join");
    });
    model_.copy_from(centre);
  }

  void pull() {
    const std::span<float> x = message_.payload_as<float>();
    model_.copy_to(x);
    if (is_server()) {
      pull_locally(x);
    } else {
      const auto sent = message_.write(wire::kind::pull, ++pulls_, static_cast<double>(this->stats_.steps), bytes_);
      this->metered(comm_, "easgd_async pull", [&] {
        std::array<request, 2> round_trip{comm_.irecv(reply_.buffer(), options_.server, reply_tag),
                                          comm_.isend(sent, options_.server, request_tag)};
        comm_.wait_all(round_trip, "easgd_async pull");
        const wire::reader from{comm_.world_rank(comm_.rank()), comm_.world_rank(options_.server), "easgd_async pull"};
        wire::expect_sequence(reply_.read(round_trip[0].received_bytes(), {wire::kind::reply}, bytes_, from), pulls_,
                              from);
      });
      subtract(reply_.payload_as<float>());
    }
    ++this->stats_.exchanges;
  }

  void pull_locally(std::span<const float> x) {
    std::lock_guard lock(centre_mutex_);
    elastic_difference(x, reply_.payload_as<float>());
    subtract(reply_.payload_as<float>());
  }

  // d = alpha (x - c); c += d. Caller holds centre_mutex_.
  void elastic_difference(std::span<const float> x, std::span<float> d) {
    elastic_answer(x, centre_, d, static_cast<float>(options_.alpha));
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
    serving_comm_ = comm_;
    desk_.open(serving_comm_);
    std::vector<int> ranks;
    for (int rank = 0; rank < comm_.size(); ++rank)
      if (rank != options_.server) ranks.push_back(rank);
    workers_ = worker_roster(std::move(ranks));
    for (std::size_t w = 0; w < workers_.size(); ++w) add_slot();
    if (workers_.size() > 0 || comm_.store() != nullptr)  // with a store, workers may join
      serving_ = comm_.progress_thread().add([this] { return serve(); });
  }

  // Worker w's slot, its first receive posted.
  worker_slot& add_slot() {
    worker_slot& slot = slots_.emplace_back();
    slot.incoming = wire::message(bytes_);
    slot.reply = wire::message(bytes_);
    post(slots_.size() - 1);
    return slot;
  }

  void post(std::size_t w) {
    slots_[w].receive =
        serving_comm_.irecv(slots_[w].incoming.buffer(), workers_.rank(w), request_tag, receive_kind::standing);
  }

  // Answers every pull that has arrived, and admits joiners (on the
  // progress thread, or on the trainer's in finish()); true if there was one.
  bool serve() {
    bool worked = false;
    while (const std::optional<int> joiner = desk_.next(serving_comm_)) {
      welcome(*joiner);
      worked = true;
    }
    for (std::size_t w = 0; w < workers_.size(); ++w) {
      if (!workers_.sending(w)) continue;
      try {
        worked = serve_worker(w) || worked;
      } catch (const error& failure) {
        drop(workers_.absorb(serving_comm_, failure, losses_, merges_.load(std::memory_order_relaxed)));
      }
    }
    return worked;
  }

  // A joiner (transport rank), now reachable: a worker slot, and the
  // centre as it is now for its first model.
  void welcome(int joiner) {
    serving_comm_ = serving_comm_.with(joiner);
    workers_.admit(serving_comm_.size() - 1);
    worker_slot& slot = add_slot();
    {
      std::lock_guard lock(centre_mutex_);
      slot.welcome = centre_;
    }
    slot.answer =  // standing: a joiner that dies before it takes it fails nothing else
        serving_comm_.isend(std::span<const float>(slot.welcome), serving_comm_.size() - 1, admission::welcome_tag,
                            receive_kind::standing);
  }

  // A dead worker (roster.hpp's rule): its pulls so far stay in the centre.
  void drop(int rank) {
    if (!workers_.drop(rank)) return;
    worker_slot& slot = slots_[workers_.index_of(rank)];
    slot.receive = request{};
    slot.answer = request{};
  }

  void send_centre(std::span<float> centre) {
    for (std::size_t w = 0; w < workers_.size(); ++w) {
      if (workers_.at(w) != standing::finished) continue;
      try {
        serving_comm_.send(centre, workers_.rank(w), centre_tag);
      } catch (const error& failure) {  // it died after its goodbye
        drop(workers_.absorb(serving_comm_, failure, losses_, merges_.load(std::memory_order_relaxed)));
      }
    }
  }

  // Worker w's next message, if it has arrived; true if there was one.
  bool serve_worker(std::size_t w) {
    worker_slot& slot = slots_[w];
    if (!serving_comm_.test(slot.receive)) return false;
    const wire::reader from{serving_comm_.world_rank(serving_comm_.rank()), serving_comm_.world_rank(workers_.rank(w)),
                            "easgd_async serve"};
    const wire::header head = slot.incoming.read(
        slot.receive.received_bytes(), {wire::kind::pull, wire::kind::done, wire::kind::leaving}, bytes_, from);
    workers_.heard_from(w);
    if (head.what != wire::kind::pull) {
      wire::expect_sequence(head, slot.pulls, from);
      workers_.said_goodbye(w, head.what == wire::kind::leaving);
      return true;
    }
    wire::expect_sequence(head, ++slot.pulls, from);
    serving_comm_.wait(slot.answer, "easgd_async reply");  // the previous reply (or the welcome) left long ago
    {
      std::lock_guard lock(centre_mutex_);
      elastic_difference(slot.incoming.template payload_as<float>(), slot.reply.template payload_as<float>());
    }
    const auto answer = slot.reply.write(wire::kind::reply, head.sequence, 0.0, bytes_);
    const traffic before = this_thread_traffic();
    slot.answer = serving_comm_.isend(answer, workers_.rank(w), reply_tag);
    const traffic sent = this_thread_traffic() - before;
    served_bytes_.fetch_add(sent.bytes_sent, std::memory_order_relaxed);
    served_messages_.fetch_add(sent.messages_sent, std::memory_order_relaxed);
    post(w);
    return true;
  }

  Communicator comm_;
  parameters model_;
  easgd_async_options options_;
  std::size_t elements_, bytes_;
  wire::message message_;    // this rank's pulls (x) and goodbye
  wire::message reply_;      // d, the answer to a pull
  std::uint64_t pulls_ = 0;  // sent to the server
  // Server only. Its serving side's view of the group, which grows by the
  // joiners it admits (the trainer thread's comm_ does not).
  Communicator serving_comm_;
  admission::desk<Communicator> desk_;
  std::vector<float> centre_;
  worker_roster workers_;          // the serving thread's alone
  std::deque<worker_slot> slots_;  // by the roster's index; grows without moving a slot
  peer_losses losses_;
  std::mutex centre_mutex_;
  std::atomic<std::uint64_t> merges_{0};
  std::atomic<std::uint64_t> served_bytes_{0};
  std::atomic<std::uint64_t> served_messages_{0};
  progress_thread::registration serving_;
};

template <class C>
easgd_async(C&, parameters, easgd_async_options = {}) -> easgd_async<host_side_t<C>>;

}  // namespace chorus::averaging
