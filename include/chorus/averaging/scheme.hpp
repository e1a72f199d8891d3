// The shape every averaging scheme has, so trainers can swap them and a new
// scheme is a new file of the same shape:
//
//   chorus::averaging::dpsgd scheme(comm, model, {.topology = ..., .codec = ...});
//   for (each batch) {
//     scheme.begin_step();        // before the gradient: start what overlaps it
//     compute_gradients();        // the trainer's own code
//     scheme.reduce_gradients();  // allreduce-SGD averages them; the others pass
//     apply_update();             // the trainer's optimiser on its parameters
//     scheme.end_step();          // the scheme's model step (mix, pull, push)
//   }
//   scheme.finish();              // collective: parameters become the model to
//                                 // keep (average, centre, consensus)
//   scheme.stats();               // steps, exchanges, bytes and messages sent
//
// or, the same loop body: scheme.step(compute_gradients, apply_update).
// Schemes derive from scheme_base<Derived>, which supplies step(), no-op
// hooks and the statistics; a hook wrapped in `metered` has the bytes and
// messages this thread sends during it counted and, given its communicator
// and a name, is an entry of the flight record (record/call.hpp).
#pragma once

#include <chorus/comm/traffic.hpp>
#include <chorus/core/error.hpp>
#include <chorus/record/call.hpp>

#include <atomic>
#include <cstdint>
#include <string_view>
#include <utility>

namespace chorus::averaging {

// The communicator an asynchronous scheme's messages go through (GoSGD,
// async EASGD: they poll, test and serve on a progress thread): the one it
// is given, or, for a communicator whose collectives are another library's
// (chorus::nccl::communicator names its host_communicator), the chorus
// communicator it was made from; models in device memory then move on the
// staged or direct path of cuda/router.hpp.
template <class C>
struct host_side {
  using type = C;
  static C& of(C& comm) noexcept { return comm; }
};
template <class C>
  requires requires { typename C::host_communicator; }
struct host_side<C> {
  using type = typename C::host_communicator;
  static type& of(C& comm) noexcept { return comm.host(); }
};
template <class C>
using host_side_t = typename host_side<C>::type;

struct averaging_stats {
  std::uint64_t steps = 0;       // local steps taken
  std::uint64_t exchanges = 0;   // averaging events: allreduces, mixing rounds, pulls, pushes
  std::uint64_t merges = 0;      // models received and merged (gossip, centre updates)
  std::uint64_t bytes_sent = 0;  // by this rank for the scheme, all messages
  std::uint64_t messages_sent = 0;
};

template <class Derived>
class scheme_base {
 public:
  void begin_step() {}
  void reduce_gradients() {}
  void end_step() {}
  void finish() {}

  template <class ComputeGradients, class ApplyUpdate>
  void step(ComputeGradients&& compute_gradients, ApplyUpdate&& apply_update) {
    Derived& self = static_cast<Derived&>(*this);
    self.begin_step();
    std::forward<ComputeGradients>(compute_gradients)();
    self.reduce_gradients();
    std::forward<ApplyUpdate>(apply_update)();
    self.end_step();
  }

  const averaging_stats& stats() const noexcept { return stats_; }
  // Whether this worker left the job (a scheme's leave()): from then on
  // every call but stats() is an error.
  bool left() const noexcept { return left_; }

 protected:
  void mark_left() noexcept { left_ = true; }
  void require_not_left(const char* operation, int world_rank) const {
    if (left_) throw error(errc::invalid_argument, "this worker left the job (leave())", {world_rank, -1, operation});
  }

  // Runs `work`, adding what the calling thread sent meanwhile to the stats.
  template <class Work>
  decltype(auto) metered(Work&& work) {
    const traffic before = this_thread_traffic();
    struct add_on_exit {
      averaging_stats& stats;
      traffic before;
      ~add_on_exit() {
        const traffic sent = this_thread_traffic() - before;
        stats.bytes_sent += sent.bytes_sent;
        stats.messages_sent += sent.messages_sent;
      }
    } guard{stats_, before};
    return std::forward<Work>(work)();
  }
  // The same, as a scheme entry named `what` in the flight record of `comm`
  // (record/call.hpp): the collectives and messages `work` makes are
  // entries of their own within it.
  template <class Communicator, class Work>
  decltype(auto) metered(const Communicator& comm, std::string_view what, Work&& work) {
    const record::recorded_call recorded(record::recorder_of(comm), record::scheme_call(what));
    return metered(std::forward<Work>(work));
  }
  void count_step() noexcept { ++stats_.steps; }

  averaging_stats stats_;

 private:
  bool left_ = false;
};

}  // namespace chorus::averaging
