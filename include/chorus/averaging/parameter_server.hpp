// Parameter server (Dean et al. 2012, Downpour; Ho et al. 2013, SSP): the
// model is cut into shards held by server roles; workers push gradients to
// every shard's server and pull the shards back; the server applies its
// optimiser (SGD with momentum, local_optimizer.hpp) to its shard.
//
//   chorus::averaging::parameter_server ps(comm, model, gradients,
//       {.mode = chorus::averaging::consistency::ssp, .staleness = 3});
//   if (ps.is_worker()) for (each batch) ps.step(compute_gradients, [] {});
//   ps.finish();   // collective: every rank's model becomes the servers'
//
// Layouts: `dedicated_servers = k` puts the shards on ranks 0..k-1, which
// serve and do not train (their trainer calls finish() at once); 0 (the
// default) puts one shard on every rank, each also a worker: per exchange a
// rank sends (n-1)/n of the model's gradient and receives (n-1)/n of the
// model, 2 (n-1)/n S in all, like a ring allreduce, in 2 (n-1) messages
// that all go at once (alpha terms overlap).
//
// Consistency (parameter_shard.hpp has the rules; one code path for all):
//   bsp       every step's update holds every worker's gradient once; the
//             pull at end_step() waits for the round. With plain SGD it is
//             allreduce-SGD (same bits on dyadic data).
//   ssp       staleness bound s: the pull waits only while this worker is
//             more than s steps ahead of the slowest; it holds all of its
//             own pushes and every worker's first (clock - s).
//   downpour  push the gradients summed over push_every steps, fetch every
//             fetch_every steps without waiting (the reply is taken at a
//             later step boundary); staleness is recorded, not bounded.
//             With fetch_by_get a fetch reads every shard from a window
//             (window.hpp) where its server publishes it after each update:
//             one-sided, no request, no reply, the newest shard at once
//             (the servers' progress threads answer across hosts).
//             With push_by_accumulate a push is a window accumulate into
//             the worker's slot at each other server, which takes what
//             landed (summed, with the count and versions riding as two
//             extra elements) as one optimiser step; the own shard's push
//             stays a message. A worker's goodbye waits until every server
//             has read its slot.
// The trainer's own optimiser step (apply_update) runs between pulls only:
// each pull replaces the model by the servers' (in BSP and SSP every step,
// so pass a no-op there).
//
// Servers work on the communicator's progress thread; finish() waits for
// every worker's goodbye (bounded by the timeout), then every server sends
// its shard to every other rank. Membership (docs/averaging.md): a worker
// that serves no shard may leave() (its pending pushes applied once); under
// on_peer_failure = continue_ (SSP, Downpour) a server forgets a dead
// worker, whose pushes so far stay; a dead server is an error on every
// worker (shards are not replicated); a joiner becomes one more worker,
// welcomed with every shard (parameter_shard.hpp: how its clock and pushes
// count).
#pragma once

#include <chorus/averaging/admission.hpp>
#include <chorus/averaging/local_optimizer.hpp>
#include <chorus/averaging/parameter_shard.hpp>
#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/peer_loss.hpp>
#include <chorus/averaging/scheme.hpp>
#include <chorus/averaging/wire.hpp>
#include <chorus/collective/broadcast/broadcast.hpp>
#include <chorus/comm/poller_mutex.hpp>
#include <chorus/comm/progress_thread.hpp>
#include <chorus/core/error.hpp>
#include <chorus/window/window.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace chorus::averaging {

struct parameter_server_options {
  consistency mode = consistency::bsp;
  std::uint64_t staleness = 3;    // SSP: s
  std::uint64_t push_every = 1;   // Downpour: n_push
  std::uint64_t fetch_every = 1;  // Downpour: n_fetch
  int dedicated_servers = 0;      // 0: a shard on every rank; k: ranks 0..k-1 serve only
  sgd_options optimiser{.learning_rate = 0.05, .momentum = 0.9};     // the servers'
  peer_failure_policy on_peer_failure = peer_failure_policy::raise;  // for dead workers (SSP, Downpour)
  bool fetch_by_get = false;        // Downpour: fetch with a window get of the published shards, not a pull
  bool push_by_accumulate = false;  // Downpour: push by window accumulate into the servers' slots
};

// A worker's view of the exchange, beside the servers' shard_stats.
struct worker_wait_stats {
  std::uint64_t pulls = 0;
  std::uint64_t fetches_applied = 0;  // Downpour: replies taken into the model
  double waited_seconds = 0;          // blocked in pulls (BSP, SSP)
};

template <class Communicator>
class parameter_server : public scheme_base<parameter_server<Communicator>> {
 public:
  using request = typename Communicator::request;

  // Collective: every rank starts from rank 0's model. In a process that
  // joined the running job: admission by every server, starting from the
  // model as the servers hold it.
  parameter_server(Communicator& comm, parameters model, parameters gradients, parameter_server_options options = {})
      : comm_(comm.joined() ? admission::enter(comm, "parameter_server") : comm.split(0, comm.rank())),
        model_(std::move(model)),
        gradients_(std::move(gradients)),
        options_(options),
        servers_(options_.dedicated_servers > 0 ? options_.dedicated_servers : comm_.size() - (comm.joined() ? 1 : 0)),
        losses_(options_.on_peer_failure) {
    check_options();
    model_.require_same_shape(gradients_, "parameter_server gradients");
    if (comm.joined()) {
      join();
      return;
    }
    admission::open(comm_, "parameter_server");
    std::vector<float> start = model_.snapshot();
    this->metered(comm_, "parameter_server start", [&] { broadcast(comm_, std::span<float>(start), 0); });
    model_.copy_from(start);
    if (is_worker()) open_links();
    if (options_.push_by_accumulate) open_push_window();
    if (options_.fetch_by_get) open_shard_window(start);
    if (comm_.rank() < servers_) start_serving(start);
  }

  ~parameter_server() { serving_.release(); }

  bool is_worker() const noexcept { return comm_.rank() >= first_worker(); }
  bool is_server() const noexcept { return comm_.rank() < servers_; }
  int workers() const noexcept { return comm_.size() - first_worker(); }

  // The trainer thread's traffic, plus the replies this rank's server sent.
  averaging_stats stats() const noexcept {
    averaging_stats total = this->stats_;
    total.bytes_sent += served_bytes_.load(std::memory_order_relaxed);
    total.messages_sent += served_messages_.load(std::memory_order_relaxed);
    return total;
  }
  // What this rank's shard saw (zeros on a rank that serves none).
  shard_stats server_stats() const { return shard_ ? shard_->stats() : shard_stats{}; }
  const worker_wait_stats& worker_stats() const noexcept { return waits_; }
  // The workers this rank's server went on without (on_peer_failure =
  // continue_); `step`: the gradients its shard had applied when it noticed.
  std::vector<lost_peer> lost_peers() const { return losses_.list(); }

  // A learning-rate schedule without a message to the servers: this
  // worker's pushes are scaled by rate / optimiser.learning_rate. Exact for
  // plain SGD; with momentum the velocity carries the old scale for about
  // 1 / (1 - momentum) steps.
  void set_learning_rate(double rate) {
    if (!(rate >= 0.0) || options_.optimiser.learning_rate <= 0.0)
      throw error(errc::invalid_argument, "parameter_server: learning rate " + std::to_string(rate) +
                                              " (servers' rate " + std::to_string(options_.optimiser.learning_rate) +
                                              ")");
    gradient_scale_ = static_cast<float>(rate / options_.optimiser.learning_rate);
  }

  void begin_step() {
    require_here("parameter_server step");
    comm_.require_merged("parameter_server step");
    if (is_worker() && fetching_) take_fetch_if_arrived();
  }

  void reduce_gradients() {
    require_here("parameter_server step");
    if (!is_worker()) return;
    gradients_.copy_to(gradient_);
    if (gradient_scale_ != 1.0f)
      for (float& value : gradient_) value *= gradient_scale_;
    if (options_.mode != consistency::downpour) return push(gradient_);
    for (std::size_t k = 0; k < gradient_.size(); ++k) accumulated_[k] += gradient_[k];
    if (++accumulated_steps_ == options_.push_every) push_accumulated();
  }

  void end_step() {
    require_here("parameter_server step");
    if (!is_worker()) return;
    this->count_step();
    if (options_.mode != consistency::downpour) return pull_and_wait();
    if (options_.fetch_by_get) {
      if (this->stats_.steps % options_.fetch_every == 0) fetch_published();
      return;
    }
    if (fetching_) take_fetch_if_arrived();
    if (!fetching_ && this->stats_.steps % options_.fetch_every == 0) start_fetch();
  }

  // Collective: workers push what they hold, take their last fetch and say
  // goodbye; servers serve until every worker has; then every rank's model
  // becomes the servers' shards.
  void finish() {
    require_here("parameter_server finish");
    if (is_worker()) say_goodbye(wire::kind::done);
    std::vector<float> assembled(model_.size());
    if (is_server()) {
      serving_.stop();  // from here on this thread serves
      const auto all_gone = [&] {
        serve_shard(true);
        return shard_->all_done();
      };
      comm_.progress_until(all_gone, "parameter_server finish, waiting for every worker's goodbye");
      const std::span<const float> mine = shard_->values();
      std::copy(mine.begin(), mine.end(), assembled.begin() + static_cast<std::ptrdiff_t>(shard_offset(comm_.rank())));
    }
    this->metered(comm_, "parameter_server finish", [&] { exchange_shards(assembled); });
    model_.copy_from(assembled);
  }

  // Leaves the job on purpose, between steps (instead of finish()); a
  // worker that serves no shard only. Returns once every server has this
  // worker's pushes; the scheme is then closed here.
  void leave() {
    require_here("parameter_server leave");
    if (!is_worker() || is_server())
      throw error(errc::invalid_argument,
                  "parameter_server leave: this rank serves a shard, which no other rank holds (workers that serve "
                  "none, with dedicated_servers, may leave)",
                  {comm_.world_rank(comm_.rank()), -1, "parameter_server leave"});
    say_goodbye(wire::kind::leaving);
    this->mark_left();
  }

 private:
  using shard = parameter_shard<Communicator>;

  void require_here(const char* operation) const { this->require_not_left(operation, comm_.world_rank(comm_.rank())); }

  bool admits_joiners() const noexcept {
    return options_.mode != consistency::bsp && !options_.fetch_by_get && !options_.push_by_accumulate;
  }

  // A joiner: introduced to every server, it assembles the model from
  // their welcomes (each a shard as it is, with its version).
  void join() {
    if (!admits_joiners())
      throw error(errc::invalid_argument,
                  "parameter_server: a worker may join SSP and Downpour pushing and fetching by messages; " +
                      std::string(to_string(options_.mode)) +
                      (options_.mode == consistency::bsp ? " rounds need every worker from the start"
                                                         : " with windows has a slot per worker fixed at the start"),
                  {comm_.world_rank(comm_.rank()), -1, "parameter_server join"});
    open_links();
    this->metered(comm_, "parameter_server join", [&] {
      std::vector<request> welcomes;
      std::vector<int> servers;
      for (int s = 0; s < servers_; ++s) {
        welcomes.push_back(comm_.irecv(link(s).reply.buffer(), s, admission::welcome_tag));
        servers.push_back(s);
      }
      admission::welcomed(comm_, std::span(welcomes), servers,
                          "parameter_server join, waiting for every server's welcome");
      for (int s = 0; s < servers_; ++s) {
        const wire::reader reader{comm_.world_rank(comm_.rank()), comm_.world_rank(s), "parameter_server join"};
        const wire::header head = link(s).reply.read(welcomes[static_cast<std::size_t>(s)].received_bytes(),
                                                     {wire::kind::reply}, shard_bytes(s), reader);
        take_shard(s, link(s).reply.template payload_as<float>(), wire::count_of(head, reader));
      }
    });
    model_.copy_from(flat_);
  }

  struct server_link {
    wire::message push, pull, reply, done;
    request push_send, pull_send, reply_receive, done_send;
    std::uint64_t sent = 0;     // messages to the server: their sequence
    std::uint64_t replies = 0;  // taken
    std::uint64_t version = 0;  // of the shard in the last reply
  };

  static constexpr int shard_tag = 3;

  // Every server sends its shard to every other live rank; every rank
  // receives the shards it does not hold. Point to point, not a collective:
  // only the servers know which workers were lost.
  void exchange_shards(std::span<float> assembled) {
    std::vector<request> moves;
    for (int s = 0; s < servers_; ++s)
      if (s != comm_.rank())
        moves.push_back(comm_.irecv(assembled.subspan(shard_offset(s), shard_size(s)), s, shard_tag));
    if (is_server()) {  // to every rank its server knows, joiners too
      const std::span<const float> mine = assembled.subspan(shard_offset(comm_.rank()), shard_size(comm_.rank()));
      for (int r = 0; r < serving_comm_.size(); ++r)
        if (r != comm_.rank() && !shard_->gone(r)) moves.push_back(serving_comm_.isend(mine, r, shard_tag));
    }
    comm_.wait_all(moves, "parameter_server finish, exchanging the shards");
  }

  void check_options() const {
    const int n = comm_.size();
    if (options_.mode == consistency::bsp && options_.on_peer_failure == peer_failure_policy::continue_)
      throw error(errc::invalid_argument,
                  "parameter_server: BSP is synchronous (a round needs every worker) and cannot "
                  "go on without one; on_peer_failure = continue is for ssp and downpour");
    if (options_.dedicated_servers < 0 || options_.dedicated_servers >= n)
      throw error(errc::invalid_argument, "parameter_server: " + std::to_string(options_.dedicated_servers) +
                                              " dedicated servers leave no worker among " + std::to_string(n) +
                                              " ranks");
    if (options_.push_every == 0 || options_.fetch_every == 0)
      throw error(errc::invalid_argument, "parameter_server: push_every and fetch_every must be at least 1");
    if (options_.fetch_by_get && options_.mode != consistency::downpour)
      throw error(errc::invalid_argument, "parameter_server: fetch_by_get is Downpour's; " +
                                              std::string(to_string(options_.mode)) +
                                              " pulls wait for their server's rules");
    if (options_.push_by_accumulate && options_.mode != consistency::downpour)
      throw error(errc::invalid_argument, "parameter_server: push_by_accumulate is Downpour's; " +
                                              std::string(to_string(options_.mode)) +
                                              " counts each push into its rounds and clocks");
    if (options_.mode != consistency::downpour && (options_.push_every != 1 || options_.fetch_every != 1))
      throw error(errc::invalid_argument, "parameter_server: push_every and fetch_every are Downpour's; " +
                                              std::string(to_string(options_.mode)) + " pushes and pulls every step");
  }

  int first_worker() const noexcept { return options_.dedicated_servers; }
  std::size_t shard_offset(int s) const noexcept {
    return model_.size() * static_cast<std::size_t>(s) / static_cast<std::size_t>(servers_);
  }
  std::size_t shard_size(int s) const noexcept { return shard_offset(s + 1) - shard_offset(s); }
  std::size_t shard_bytes(int s) const noexcept { return shard_size(s) * sizeof(float); }
  // ceil(S / servers): shards differ by one at most (a window's padded slot).
  std::size_t largest_shard_size() const noexcept {
    const auto servers = static_cast<std::size_t>(servers_);
    return (model_.size() + servers - 1) / servers;
  }

  void open_links() {
    gradient_.assign(model_.size(), 0.0f);
    flat_.assign(model_.size(), 0.0f);
    if (options_.mode == consistency::downpour) accumulated_.assign(model_.size(), 0.0f);
    links_.resize(static_cast<std::size_t>(servers_));
    for (int s = 0; s < servers_; ++s) {
      server_link& link = links_[static_cast<std::size_t>(s)];
      link.push = wire::message(shard_bytes(s));
      link.reply = wire::message(shard_bytes(s));
    }
  }

  void start_serving(const std::vector<float>& start) {
    const std::span<const float> mine = std::span(start).subspan(shard_offset(comm_.rank()), shard_size(comm_.rank()));
    std::vector<int> workers;
    for (int w = first_worker(); w < comm_.size(); ++w) workers.push_back(w);
    serving_comm_ = comm_;
    if (admits_joiners()) desk_.open(serving_comm_);
    shard_ = std::make_unique<shard>(
        serving_comm_, mine, std::move(workers),
        shard_rules{options_.mode, options_.staleness, options_.optimiser, options_.push_by_accumulate}, losses_);
    serving_ = comm_.progress_thread().add([this] { return serve_counted(); });
  }

  // The server's work with its traffic counted (it runs on the progress thread).
  bool serve_counted() {
    const traffic before = this_thread_traffic();
    const bool worked = serve_shard();
    const traffic sent = this_thread_traffic() - before;
    served_bytes_.fetch_add(sent.bytes_sent, std::memory_order_relaxed);
    served_messages_.fetch_add(sent.messages_sent, std::memory_order_relaxed);
    return worked;
  }

  server_link& link(int s) { return links_[static_cast<std::size_t>(s)]; }

  void push(std::span<const float> gradient) {
    this->metered(comm_, "parameter_server push", [&] {
      for (int s = 0; s < servers_; ++s) {
        server_link& to = link(s);
        const std::span<const float> part = gradient.subspan(shard_offset(s), shard_size(s));
        if (push_window_ && s != comm_.rank()) {
          accumulate_push(s, part);
          continue;
        }
        comm_.wait(to.push_send, "parameter_server push");  // the previous push's buffer
        std::copy(part.begin(), part.end(), to.push.template payload_as<float>().begin());
        const auto bytes = to.push.write(wire::kind::push, ++to.sent, static_cast<double>(to.version), shard_bytes(s));
        to.push_send = comm_.isend(bytes, s, parameter_shard<Communicator>::request_tag);
      }
    });
    ++pushes_;
    ++this->stats_.exchanges;
  }

  // push_by_accumulate: the slot's tensor is [shard gradient, padding,
  // pushes, versions]; each accumulate adds 1 push and the version of the
  // shard it was computed on.
  void open_push_window() {
    push_part_.assign(largest_shard_size() + 2, 0.0f);
    if (is_server())
      for (int w = first_worker(); w < comm_.size(); ++w)
        if (w != comm_.rank()) pushers_.push_back(w);
    this->metered(comm_, "parameter_server open", [&] {
      push_window_ = std::make_unique<window<Communicator>>(
          comm_, push_part_,
          window_options{.sources = pushers_,
                         .drop_dead_peers = options_.on_peer_failure == peer_failure_policy::continue_});
    });
  }

  void accumulate_push(int s, std::span<const float> part) {
    std::copy(part.begin(), part.end(), push_part_.begin());
    std::fill(push_part_.begin() + static_cast<std::ptrdiff_t>(part.size()), push_part_.end() - 2, 0.0f);
    push_part_[push_part_.size() - 2] = 1.0f;
    push_part_[push_part_.size() - 1] = static_cast<float>(link(s).version);
    give_way_to_server();
    std::lock_guard lock(push_lock_);
    push_window_->accumulate(push_part_, {{s, 1.0}});
  }

  // A worker whose pushes wait on the network holds the lock most of the
  // time; its server, which never waits for it, would rarely take its
  // slots, and every worker pushing to it would then wait for room. So
  // when the server found the lock held, the worker lets it have a turn
  // first (bounded: a server that stopped serving holds no one up long).
  void give_way_to_server() {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    while (server_waiting_.load(std::memory_order_acquire) && std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
  }

  // The server's side: every worker's slot that holds new pushes, into the
  // shard (waiting for the lock as serve_shard says).
  bool take_accumulated_pushes(bool may_wait) {
    const std::unique_lock lock = locked(push_lock_, may_wait);
    server_waiting_.store(!lock, std::memory_order_release);
    if (!lock) return false;
    landed_.clear();
    for (int w : pushers_)
      if (!push_window_->lost(w) && push_window_->version(w) > 0) landed_.push_back(w);
    if (landed_.empty()) return false;
    const std::size_t mine = shard_size(comm_.rank()), padded = push_part_.size() - 2;
    push_window_->collect_from(
        landed_,
        [&](int w, std::span<const float> slot, double) {
          shard_->take_summed(w, slot.first(mine), static_cast<std::uint64_t>(std::llround(slot[padded])),
                              static_cast<double>(slot[padded + 1]));
        },
        true);
    return true;
  }

  static std::unique_lock<poller_mutex> locked(poller_mutex& mutex, bool may_wait) {
    if (may_wait) return std::unique_lock(mutex);
    return std::unique_lock(mutex, std::try_to_lock);
  }

  void push_accumulated() {
    push(accumulated_);
    std::fill(accumulated_.begin(), accumulated_.end(), 0.0f);
    accumulated_steps_ = 0;
  }

  // Asks every server for its shard; the replies land in the links.
  void start_fetch() {
    this->metered(comm_, "parameter_server fetch", [&] {
      for (int s = 0; s < servers_; ++s) {
        server_link& to = link(s);
        comm_.wait(to.pull_send, "parameter_server pull");
        to.reply_receive = comm_.irecv(to.reply.buffer(), s, parameter_shard<Communicator>::reply_tag);
        to.pull_send = comm_.isend(to.pull.write(wire::kind::pull, ++to.sent, static_cast<double>(pushes_), 0), s,
                                   parameter_shard<Communicator>::request_tag);
      }
    });
    fetching_ = true;
    ++waits_.pulls;
  }

  // fetch_by_get: a window whose sources, on a worker, are the servers
  // (other than itself), each publishing its shard padded to the largest.
  void open_shard_window(const std::vector<float>& start) {
    std::vector<int> sources;
    if (is_worker())
      for (int s = 0; s < servers_; ++s)
        if (s != comm_.rank()) sources.push_back(s);
    published_.assign(largest_shard_size(), 0.0f);
    if (is_server()) {
      const std::span<const float> mine =
          std::span(start).subspan(shard_offset(comm_.rank()), shard_size(comm_.rank()));
      std::copy(mine.begin(), mine.end(), published_.begin());
    }
    this->metered(comm_, "parameter_server open", [&] {
      shard_window_ = std::make_unique<window<Communicator>>(comm_, published_, window_options{.sources = sources});
    });
    shard_window_->set_p(0.0);  // version 0, the start
    shard_window_->publish(published_);
  }

  // Serves what the shard can; with fetch_by_get each new version is
  // published (its worker reads it meanwhile: hence the lock). The
  // progress thread (may_wait false) never waits for a lock: a holder may
  // be waiting on the network for a window relay that this thread serves.
  bool serve_shard(bool may_wait = false) {
    const std::unique_lock lock = locked(own_shard_, may_wait);
    if (!lock) return false;
    while (const std::optional<int> joiner = desk_.next(serving_comm_)) {
      serving_comm_ = serving_comm_.with(*joiner);
      shard_->admit(serving_comm_.size() - 1);
    }
    const bool took = push_window_ && take_accumulated_pushes(may_wait);
    const bool worked = shard_->serve() || took;
    if (worked && shard_window_) publish_shard();
    return worked;
  }

  // Under own_shard_: the shard's newest version,
  // with its version number as the window's weight (what a get returns).
  void publish_shard() {
    if (shard_->version() == published_version_) return;
    published_version_ = shard_->version();
    const std::span<const float> values = shard_->values();
    std::copy(values.begin(), values.end(), published_.begin());
    shard_window_->set_p(static_cast<double>(published_version_));
    shard_window_->publish(published_);
  }

  // Every shard as its server last published it (this rank's own from its
  // server directly): no server is asked or waited for.
  void fetch_published() {
    this->metered(comm_, "parameter_server fetch", [&] {
      shard_window_->get();
      shard_window_->collect([&](int s, std::span<const float> part, double version) {
        take_shard(s, part, static_cast<std::uint64_t>(version));
      });
    });
    if (is_server()) {
      std::lock_guard lock(own_shard_);
      take_shard(comm_.rank(), shard_->values(), shard_->version());
    }
    model_.copy_from(flat_);
    ++waits_.pulls;
    ++waits_.fetches_applied;
  }

  void pull_and_wait() {
    start_fetch();
    const auto began = std::chrono::steady_clock::now();
    const auto all_replied = [&] {
      for (int s = 0; s < servers_; ++s)
        if (!comm_.test(link(s).reply_receive)) return false;
      return true;
    };
    comm_.progress_until(all_replied,
                         std::string("parameter_server pull (") + std::string(to_string(options_.mode)) + ")");
    waits_.waited_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - began).count();
    take_fetch();
  }

  void take_fetch_if_arrived() {
    for (int s = 0; s < servers_; ++s)
      if (!comm_.test(link(s).reply_receive)) return;
    take_fetch();
  }

  // Server s's shard (its first shard_size(s) values), of `version`, into
  // the model being fetched.
  void take_shard(int s, std::span<const float> part, std::uint64_t version) {
    std::copy(part.begin(), part.begin() + static_cast<std::ptrdiff_t>(shard_size(s)),
              flat_.begin() + static_cast<std::ptrdiff_t>(shard_offset(s)));
    link(s).version = version;
  }

  // Every reply is in: check them and make them the model.
  void take_fetch() {
    for (int s = 0; s < servers_; ++s) {
      server_link& from = link(s);
      const wire::reader reader{comm_.world_rank(comm_.rank()), comm_.world_rank(s), "parameter_server pull"};
      const wire::header head =
          from.reply.read(from.reply_receive.received_bytes(), {wire::kind::reply}, shard_bytes(s), reader);
      wire::expect_sequence(head, ++from.replies, reader);
      take_shard(s, from.reply.template payload_as<float>(), wire::count_of(head, reader));
    }
    model_.copy_from(flat_);
    fetching_ = false;
    ++waits_.fetches_applied;
  }

  // The worker's last messages: what it holds, then `last` (done or leaving).
  void say_goodbye(wire::kind last) {
    if (options_.mode == consistency::downpour) {
      if (accumulated_steps_ > 0) push_accumulated();  // every gradient reaches a server once
      // The goodbye below must not overtake a push still in a slot.
      if (push_window_)
        comm_.poll_until(
            [&] {
              // This loop holds the lock this rank's server takes its slots
              // under, and every worker may be in it: serve here too.
              if (is_server()) serve_shard(true);
              std::lock_guard lock(push_lock_);
              return push_window_->read_by_targets();
            },
            "parameter_server finish, the servers taking the last accumulated pushes");
      if (fetching_) {
        comm_.progress_until(
            [&] {
              for (int s = 0; s < servers_; ++s)
                if (!comm_.test(link(s).reply_receive)) return false;
              return true;
            },
            "parameter_server finish, the last fetch");
        take_fetch();
      }
    }
    this->metered(comm_, "parameter_server finish", [&] {
      std::vector<request> sends;
      for (int s = 0; s < servers_; ++s) {
        server_link& to = link(s);
        sends.push_back(std::move(to.push_send));
        sends.push_back(std::move(to.pull_send));
        sends.push_back(comm_.isend(to.done.write(last, ++to.sent, static_cast<double>(pushes_), 0), s,
                                    parameter_shard<Communicator>::request_tag));
      }
      comm_.wait_all(sends, "parameter_server goodbye");
    });
  }

  Communicator comm_;
  parameters model_, gradients_;
  parameter_server_options options_;
  int servers_;
  // Worker side.
  std::vector<server_link> links_;
  std::vector<float> gradient_, accumulated_, flat_;
  std::uint64_t accumulated_steps_ = 0;
  std::uint64_t pushes_ = 0;
  float gradient_scale_ = 1.0f;
  bool fetching_ = false;
  worker_wait_stats waits_;
  peer_losses losses_;
  // Server side. Its serving side's view of the group, which grows by the
  // joiners it admits (the trainer thread's comm_ does not); the shard's.
  Communicator serving_comm_;
  admission::desk<Communicator> desk_;
  std::unique_ptr<shard> shard_;
  // fetch_by_get: the servers' published shards; this rank's shard, between
  // its server (progress thread) and its worker; what is published.
  std::unique_ptr<window<Communicator>> shard_window_;
  // push_by_accumulate: the window of workers' slots at the servers, used by
  // the worker's thread and the server's (progress thread) under push_lock_;
  // the workers writing to this rank's server; those found with new pushes.
  std::unique_ptr<window<Communicator>> push_window_;
  poller_mutex push_lock_;
  std::atomic<bool> server_waiting_{false};  // the server found push_lock_ held
  std::vector<float> push_part_;
  std::vector<int> pushers_, landed_;
  poller_mutex own_shard_;
  std::vector<float> published_;
  std::uint64_t published_version_ = 0;
  std::atomic<std::uint64_t> served_bytes_{0};
  std::atomic<std::uint64_t> served_messages_{0};
  progress_thread::registration serving_;
};

template <class C>
parameter_server(C&, parameters, parameters, parameter_server_options = {}) -> parameter_server<C>;

}  // namespace chorus::averaging
