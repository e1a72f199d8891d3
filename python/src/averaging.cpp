// The averaging schemes on a list of float32 arrays (a model's parameters,
// read and written where they are), with the C++ shape: begin_step,
// reduce_gradients, end_step, finish, stats. chorus.Topology for D-PSGD.
// Each takes a chorus.Communicator or a chorus.nccl one, as in C++.
#include "binding.hpp"
#include "codecs.hpp"

#include <chorus/averaging/allreduce_sgd.hpp>
#include <chorus/averaging/diloco.hpp>
#include <chorus/averaging/dpsgd.hpp>
#include <chorus/averaging/easgd.hpp>
#include <chorus/averaging/easgd_async.hpp>
#include <chorus/averaging/gosgd.hpp>
#include <chorus/averaging/job_progress.hpp>
#include <chorus/averaging/local_sgd.hpp>
#include <chorus/averaging/one_sided_gossip.hpp>
#include <chorus/averaging/parameter_server.hpp>
#include <chorus/averaging/topology.hpp>
#include <chorus/averaging/tree_easgd.hpp>
#include <chorus/nccl/collectives.hpp>  // the schemes' collectives on an NCCL communicator
#include <chorus/nccl/nccl_compressed_allreduce.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <variant>

namespace chorus::python {

namespace {

namespace avg = chorus::averaging;

// A scheme with what it refers to. Over a chorus.Communicator: its own copy
// of the communicator (the synchronous schemes keep a reference). Over a
// chorus.nccl communicator, as in C++: the schemes with an NCCL form
// (OnNccl: allreduce-SGD, local SGD, EASGD, D-PSGD) run on it, kept alive
// through its Python object; the others on the chorus communicator it was
// made from (averaging/scheme.hpp's host_side).
template <class OnChorus, class OnNccl = OnChorus>
struct py_scheme {
  chorus::communicator comm;
  nb::object nccl_owner;
  py_nccl_communicator* nccl = nullptr;  // set where the scheme runs on NCCL
  nb::object arrays;
  std::variant<std::monostate, OnChorus, OnNccl> scheme;  // declared last: destroyed first

  // Calls `call` with the scheme, whichever communicator it runs on.
  template <class Call>
  decltype(auto) with(Call&& call) {
    if (scheme.index() == 0) throw error(errc::invalid_argument, "the scheme is closed");
    if (nccl != nullptr && !nccl->comm.valid())
      throw error(errc::invalid_argument, "the NCCL communicator the scheme runs on is closed");
    if (scheme.index() == 1) return call(std::get<1>(scheme));
    return call(std::get<2>(scheme));
  }
  // The scheme, where it has one type whatever it runs on.
  OnChorus& get()
    requires std::same_as<OnChorus, OnNccl>
  {
    return with([](OnChorus& made) -> OnChorus& { return made; });
  }
};

// A scheme that takes an NCCL communicator as it takes a chorus one, and
// one that runs on an NCCL communicator's chorus side.
template <template <class> class Scheme>
using on_either = py_scheme<Scheme<chorus::communicator>, Scheme<nccl::communicator>>;
template <template <class> class Scheme>
using on_host_side = py_scheme<Scheme<chorus::communicator>>;

avg::parameters parameters_of(nb::handle tensors, const char* role) {
  std::vector<std::span<float>> spans;
  for (nb::handle tensor : tensors) {
    const buffer seen = writable(tensor, role, "averaging", memory::host_or_device);
    if (seen.type != dtype::float32 || seen.boolean)
      throw error(errc::invalid_argument,
                  std::string(role) + " must be float32 arrays, not " + std::string(to_string(seen.type)),
                  {-1, -1, "averaging"});
    spans.push_back(seen.as<float>());
  }
  return avg::parameters(std::move(spans));
}

codec::any_codec wire_of(nb::handle given) {
  const codec_choice chosen = codec_choice::from(given, "averaging");
  if (chosen.feedback)
    throw error(errc::invalid_argument, "the schemes take a codec (a name or chorus.Codec); they keep no residual",
                {-1, -1, "averaging"});
  return chosen.wire;
}

nb::dict stats_of(const avg::averaging_stats& stats) {
  nb::dict made;
  made["steps"] = stats.steps;
  made["exchanges"] = stats.exchanges;
  made["merges"] = stats.merges;
  made["bytes_sent"] = stats.bytes_sent;
  made["messages_sent"] = stats.messages_sent;
  return made;
}

// The calls every scheme has (and leave(), where a worker may leave on
// purpose). Each can communicate: the GIL is released.
template <class Held>
nb::class_<Held> scheme_class(nb::module_& m, const char* name, const char* doc) {
  auto made = nb::class_<Held>(m, name, doc);
  using held = Held;
  if constexpr (requires(held& self) { std::get<1>(self.scheme).leave(); })
    made.def(
        "leave", [](held& self) { without_gil([&] { self.with([](auto& scheme) { scheme.leave(); }); }); },
        "Leaves the job on purpose, between steps, instead of finish(): this worker's share goes to the others.");
  return made
      .def(
          "begin_step", [](held& self) { without_gil([&] { self.with([](auto& scheme) { scheme.begin_step(); }); }); },
          "Before the gradient: starts what overlaps it.")
      .def(
          "reduce_gradients",
          [](held& self) { without_gil([&] { self.with([](auto& scheme) { scheme.reduce_gradients(); }); }); },
          "After the gradient, before the update: allreduce-SGD averages the gradients; the others pass.")
      .def(
          "end_step", [](held& self) { without_gil([&] { self.with([](auto& scheme) { scheme.end_step(); }); }); },
          "After the update: the scheme's model step (mix, pull, push, average).")
      .def(
          "finish", [](held& self) { without_gil([&] { self.with([](auto& scheme) { scheme.finish(); }); }); },
          "Collective: the parameters become the model to keep (average, centre, consensus).")
      .def_prop_ro(
          "stats", [](held& self) { return stats_of(self.with([](auto& scheme) { return scheme.stats(); })); },
          "steps, exchanges, merges, bytes_sent, messages_sent of this rank.")
      .def(
          "close", [](held& self) { without_gil([&] { self.scheme.template emplace<0>(); }); },
          "Stops the scheme's threads (asynchronous schemes) without finishing.");
}

// Builds the scheme in place over `over` (a chorus.Communicator's or a
// chorus.nccl communicator's _impl), with the GIL released (construction
// talks to the other ranks).
template <class OnChorus, class OnNccl, class... Args>
void construct(py_scheme<OnChorus, OnNccl>* self, nb::handle over, nb::handle arrays, Args&&... args) {
  using held = py_scheme<OnChorus, OnNccl>;
  new (self) held{};
  try {
    self->arrays = nb::borrow(arrays);
    py_communicator* chorus_side = nullptr;
    py_nccl_communicator* gpus = nullptr;
    if (nb::try_cast(over, gpus) && gpus != nullptr) {
      if constexpr (!std::is_same_v<OnChorus, OnNccl>) {
        nccl::communicator& comm = gpus->get("averaging");
        self->nccl_owner = nb::borrow(over);
        self->nccl = gpus;
        without_gil([&] { self->scheme.template emplace<2>(comm, std::forward<Args>(args)...); });
        return;
      }
      self->comm = gpus->get("averaging").host();
    } else if (nb::try_cast(over, chorus_side) && chorus_side != nullptr) {
      self->comm = chorus_side->get("averaging");
    } else {
      throw error(errc::invalid_argument, "a scheme runs on a chorus.Communicator or a chorus.nccl communicator",
                  {-1, -1, "averaging"});
    }
    without_gil([&] { self->scheme.template emplace<1>(self->comm, std::forward<Args>(args)...); });
  } catch (...) {
    self->~held();
    throw;
  }
}

avg::peer_failure_policy policy_named(const std::string& name) {
  for (avg::peer_failure_policy policy : {avg::peer_failure_policy::raise, avg::peer_failure_policy::continue_})
    if (name == avg::to_string(policy)) return policy;
  throw chorus::error(chorus::errc::invalid_argument, "on_peer_failure is 'raise' or 'continue', not '" + name + "'");
}

avg::consistency consistency_named(const std::string& name) {
  for (avg::consistency mode : {avg::consistency::bsp, avg::consistency::ssp, avg::consistency::downpour})
    if (name == avg::to_string(mode)) return mode;
  throw chorus::error(chorus::errc::invalid_argument, "mode is 'bsp', 'ssp' or 'downpour', not '" + name + "'");
}

// [{"rank": world rank, "step": .., "seconds": ..}] for lost_peers().
nb::list lost_of(const std::vector<avg::lost_peer>& lost) {
  nb::list made;
  for (const avg::lost_peer& peer : lost) {
    nb::dict entry;
    entry["rank"] = peer.rank;
    entry["step"] = peer.step;
    entry["seconds"] = peer.seconds;
    made.append(entry);
  }
  return made;
}

}  // namespace

void bind_averaging(nb::module_& m) {
  nb::class_<avg::topology>(m, "Topology", "A mixing matrix (or a cycle of them) for D-PSGD.")
      .def_static("ring", &avg::topology::ring, nb::arg("n"))
      .def_static("torus", &avg::topology::torus, nb::arg("rows"), nb::arg("cols"))
      .def_static("exponential", &avg::topology::exponential, nb::arg("n"))
      .def_static("one_peer_exponential", &avg::topology::one_peer_exponential, nb::arg("n"))
      .def_static("fully_connected", &avg::topology::fully_connected, nb::arg("n"))
      .def_static(
          "from_weights",
          [](const std::vector<std::vector<double>>& weights) { return avg::topology::from_weights(weights); },
          nb::arg("weights"), "W[i][j]: the weight rank i gives rank j's model; doubly stochastic.")
      .def_prop_ro("name", &avg::topology::name)
      .def_prop_ro("size", &avg::topology::size);

  using model_list = nb::handle;
  scheme_class<on_either<avg::allreduce_sgd>>(m, "AllreduceSGD", "Averages the gradients every step (synchronous).")
      .def(
          "__init__",
          [](on_either<avg::allreduce_sgd>* self, nb::handle comm, model_list params, model_list grads,
             nb::handle codec, std::size_t bucket_bytes) {
            avg::parameters model = parameters_of(params, "params");
            avg::parameters gradients = parameters_of(grads, "grads");
            construct(self, comm, nb::make_tuple(params, grads), std::move(model), std::move(gradients),
                      avg::allreduce_sgd_options{wire_of(codec), bucket_bytes});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("grads"), nb::arg("codec").none() = nb::none(),
          nb::arg("bucket_bytes") = 0);

  scheme_class<on_either<avg::local_sgd>>(m, "LocalSGD", "Averages the models every `period` steps.")
      .def(
          "__init__",
          [](on_either<avg::local_sgd>* self, nb::handle comm, model_list params, std::uint64_t period,
             std::uint64_t warmup_steps, nb::handle codec, std::size_t bucket_bytes) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model),
                      avg::local_sgd_options{period, warmup_steps, wire_of(codec), bucket_bytes});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("period") = 8, nb::arg("warmup_steps") = 0,
          nb::arg("codec").none() = nb::none(), nb::arg("bucket_bytes") = 0);

  scheme_class<on_host_side<avg::diloco>>(
      m, "DiLoCo", "Inner steps, then an outer optimizer on the averaged outer gradient (Streaming: in fragments).")
      .def(
          "__init__",
          [](on_host_side<avg::diloco>* self, nb::handle comm, model_list params, std::uint64_t period,
             double round_seconds, std::uint64_t round_samples, double outer_lr, double outer_momentum,
             bool nesterov, nb::handle codec, std::size_t fragments, std::uint64_t overlap_steps, double mixing,
             const std::string& on_peer_failure) {
            avg::parameters model = parameters_of(params, "params");
            avg::diloco_options options{.period = period,
                                        .round_seconds = round_seconds,
                                        .round_samples = round_samples,
                                        .outer = {outer_lr, outer_momentum, nesterov},
                                        .codec = wire_of(codec),
                                        .fragments = fragments,
                                        .overlap_steps = overlap_steps,
                                        .mixing = mixing,
                                        .on_peer_failure = policy_named(on_peer_failure)};
            construct(self, comm, params, std::move(model), std::move(options));
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("period") = 500, nb::arg("round_seconds") = 0.0,
          nb::arg("round_samples") = 0, nb::arg("outer_lr") = 0.7,
          nb::arg("outer_momentum") = 0.9, nb::arg("nesterov") = true, nb::arg("codec").none() = nb::none(),
          nb::arg("fragments") = 1, nb::arg("overlap_steps") = 0, nb::arg("mixing") = 0.0,
          nb::arg("on_peer_failure") = "raise")
      .def(
          "global_model",
          [](on_host_side<avg::diloco>& self, std::size_t fragment) {
            return numpy_array(self.get().global_model(fragment));
          },
          nb::arg("fragment") = 0, "Fragment `fragment`'s part of the last global model (a copy).")
      .def(
          "end_step",
          [](on_host_side<avg::diloco>& self, std::uint64_t samples) {
            without_gil([&] { self.get().end_step(samples); });
          },
          nb::arg("samples"), "After an inner step that processed `samples` samples (its weight in the average).")
      .def_prop_ro("job_samples", [](on_host_side<avg::diloco>& self) { return self.get().job_samples(); })
      .def_prop_ro("round_seconds", [](on_host_side<avg::diloco>& self) { return self.get().round_seconds(); })
      .def_prop_ro("syncs", [](on_host_side<avg::diloco>& self) { return self.get().syncs(); })
      .def(
          "lost_peers", [](on_host_side<avg::diloco>& self) { return lost_of(self.get().lost_peers()); },
          "The workers this one went on without (on_peer_failure='continue').");

  nb::class_<avg::job_progress>(m, "JobProgress", "The job's samples, counted in the job's store.")
      .def(
          "__init__",
          [](avg::job_progress* self, nb::handle over, const std::string& name, double interval_seconds) {
            py_communicator* chorus_side = nullptr;
            py_nccl_communicator* gpus = nullptr;
            const auto interval = std::chrono::milliseconds(static_cast<std::int64_t>(interval_seconds * 1000));
            if (nb::try_cast(over, gpus) && gpus != nullptr)
              new (self) avg::job_progress(gpus->get("job progress").host(), name, interval);
            else if (nb::try_cast(over, chorus_side) && chorus_side != nullptr)
              new (self) avg::job_progress(chorus_side->get("job progress"), name, interval);
            else
              throw error(errc::invalid_argument, "JobProgress counts on a chorus.Communicator or a chorus.nccl one",
                          {-1, -1, "job progress"});
          },
          nb::arg("comm"), nb::arg("name"), nb::arg("interval_seconds") = 0.5)
      .def(
          "add", [](avg::job_progress& self, std::uint64_t samples) { without_gil([&] { self.add(samples); }); },
          nb::arg("samples"), "This rank processed `samples` more (the store hears of them once an interval passed).")
      .def(
          "flush", [](avg::job_progress& self) { without_gil([&] { self.flush(); }); },
          "Adds this rank's unflushed samples to the job's count now.")
      .def_prop_ro("samples", &avg::job_progress::samples, "The job's samples as this rank knows them.")
      .def_prop_ro("own", &avg::job_progress::own, "This rank's samples.");

  scheme_class<on_either<avg::dpsgd>>(m, "DPSGD", "Mixes with the neighbours of a topology every step.")
      .def(
          "__init__",
          [](on_either<avg::dpsgd>* self, nb::handle comm, model_list params, std::optional<avg::topology> topology,
             nb::handle codec, bool one_sided) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model),
                      avg::dpsgd_options{std::move(topology), wire_of(codec), one_sided});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("topology").none() = nb::none(),
          nb::arg("codec").none() = nb::none(), nb::arg("one_sided") = false);

  using gossip = on_host_side<avg::one_sided_gossip>;
  scheme_class<gossip>(m, "OneSidedGossip",
                       "Push-sum gossip over a tensor window: accumulate into the out-neighbours' slots, never wait.")
      .def(
          "__init__",
          [](gossip* self, nb::handle comm, model_list params, std::optional<avg::topology> topology, nb::handle codec,
             const std::string& on_peer_failure) {
            avg::parameters model = parameters_of(params, "params");
            construct(
                self, comm, params, std::move(model),
                avg::one_sided_gossip_options{std::move(topology), wire_of(codec), policy_named(on_peer_failure)});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("topology").none() = nb::none(),
          nb::arg("codec").none() = nb::none(), nb::arg("on_peer_failure") = "raise")
      .def(
          "lost_peers", [](gossip& self) { return lost_of(self.get().lost_peers()); },
          "The neighbours this rank went on without (on_peer_failure='continue').")
      .def(
          "quiesce", [](gossip& self) { without_gil([&] { self.get().quiesce(); }); },
          "Collective: every push made before any rank's quiesce() is merged; the weights sum to the ranks.")
      .def_prop_ro(
          "weight", [](gossip& self) { return self.get().weight(); },
          "This rank's push-sum weight p: sum(p * model) / sum(p) over the ranks is the consensus.");

  scheme_class<on_either<avg::easgd>>(m, "EASGD", "Synchronous elastic averaging around a centre.")
      .def(
          "__init__",
          [](on_either<avg::easgd>* self, nb::handle comm, model_list params, double alpha, std::uint64_t tau,
             nb::handle codec) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model), avg::easgd_options{alpha, tau, wire_of(codec)});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("alpha") = 0.05, nb::arg("tau") = 1,
          nb::arg("codec").none() = nb::none())
      .def(
          "centre",
          [](on_either<avg::easgd>& self) {
            return numpy_array(self.with([](auto& scheme) { return scheme.centre(); }));
          },
          "A copy of the centre (every rank holds it).");

  scheme_class<on_host_side<avg::easgd_async>>(
      m, "EASGDAsync", "Asynchronous elastic averaging: workers pull from a server rank's centre.")
      .def(
          "__init__",
          [](on_host_side<avg::easgd_async>* self, nb::handle comm, model_list params, double alpha, std::uint64_t tau,
             int server, const std::string& on_peer_failure) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model),
                      avg::easgd_async_options{alpha, tau, server, policy_named(on_peer_failure)});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("alpha") = 0.05, nb::arg("tau") = 4, nb::arg("server") = 0,
          nb::arg("on_peer_failure") = "raise")
      .def(
          "lost_peers", [](on_host_side<avg::easgd_async>& self) { return lost_of(self.get().lost_peers()); },
          "The workers the server went on without (on_peer_failure='continue').")
      .def(
          "centre", [](on_host_side<avg::easgd_async>& self) { return numpy_array(self.get().centre()); },
          "A copy of the centre: the server's (empty on the workers).");

  scheme_class<on_host_side<avg::gosgd>>(m, "GoSGD", "Gossip: push the model to a random peer.")
      .def(
          "__init__",
          [](on_host_side<avg::gosgd>* self, nb::handle comm, model_list params, double push_probability,
             std::uint64_t seed, nb::handle codec, const std::string& on_peer_failure) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model),
                      avg::gosgd_options{push_probability, seed, wire_of(codec), policy_named(on_peer_failure)});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("push_probability") = 0.5, nb::arg("seed") = 1,
          nb::arg("codec").none() = nb::none(), nb::arg("on_peer_failure") = "raise")
      .def(
          "lost_peers", [](on_host_side<avg::gosgd>& self) { return lost_of(self.get().lost_peers()); },
          "The peers this rank went on without (on_peer_failure='continue').")
      .def(
          "quiesce", [](on_host_side<avg::gosgd>& self) { without_gil([&] { self.get().quiesce(); }); },
          "Collective: a consistent cut; every push sent before any rank's quiesce() is merged, none after, so "
          "the weights over the ranks sum to 1 until the next step.")
      .def_prop_ro(
          "weight", [](on_host_side<avg::gosgd>& self) { return self.get().weight(); },
          "This rank's share of the consensus: sum(weight * model) over the ranks is the model to keep.");

  scheme_class<on_host_side<avg::tree_easgd>>(m, "TreeEASGD",
                                              "Elastic averaging on a tree of fan-out d; the root's model is kept.")
      .def(
          "__init__",
          [](on_host_side<avg::tree_easgd>* self, nb::handle comm, model_list params, double alpha,
             std::uint64_t tau_up, std::uint64_t tau_down, int fanout) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model), avg::tree_easgd_options{alpha, tau_up, tau_down, fanout});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("alpha") = 0.05, nb::arg("tau_up") = 4, nb::arg("tau_down") = 4,
          nb::arg("fanout") = 2);

  using server = on_host_side<avg::parameter_server>;
  scheme_class<server>(m, "ParameterServer",
                       "Shards on server roles; workers push gradients and pull the model (bsp, ssp, downpour).")
      .def(
          "__init__",
          [](server* self, nb::handle comm, model_list params, model_list grads, const std::string& mode,
             std::uint64_t staleness, std::uint64_t push_every, std::uint64_t fetch_every, int dedicated_servers,
             double learning_rate, double momentum, bool nesterov, const std::string& on_peer_failure,
             bool fetch_by_get, bool push_by_accumulate) {
            avg::parameters model = parameters_of(params, "params");
            avg::parameters gradients = parameters_of(grads, "grads");
            construct(self, comm, nb::make_tuple(params, grads), std::move(model), std::move(gradients),
                      avg::parameter_server_options{consistency_named(mode),
                                                    staleness,
                                                    push_every,
                                                    fetch_every,
                                                    dedicated_servers,
                                                    {learning_rate, momentum, nesterov, 0.0},
                                                    policy_named(on_peer_failure),
                                                    fetch_by_get,
                                                    push_by_accumulate});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("grads"), nb::arg("mode") = "bsp", nb::arg("staleness") = 3,
          nb::arg("push_every") = 1, nb::arg("fetch_every") = 1, nb::arg("dedicated_servers") = 0,
          nb::arg("learning_rate") = 0.05, nb::arg("momentum") = 0.9, nb::arg("nesterov") = false,
          nb::arg("on_peer_failure") = "raise", nb::arg("fetch_by_get") = false, nb::arg("push_by_accumulate") = false)
      .def_prop_ro("is_worker", [](server& self) { return self.get().is_worker(); })
      .def(
          "set_learning_rate", [](server& self, double rate) { self.get().set_learning_rate(rate); }, nb::arg("rate"),
          "Scales this worker's pushes by rate / the servers' learning rate.")
      .def(
          "server_stats",
          [](server& self) {
            const avg::shard_stats shard = self.get().server_stats();
            nb::dict made;
            made["gradients_applied"] = shard.gradients_applied;
            made["staleness_mean"] = shard.mean_staleness();
            made["staleness_max"] = shard.staleness_max;
            made["clock_gap_max"] = shard.clock_gap_max;
            made["pulls_served"] = shard.pulls_served;
            return made;
          },
          "What this rank's shard saw: gradients applied, their staleness, the largest clock gap served.")
      .def(
          "lost_peers", [](server& self) { return lost_of(self.get().lost_peers()); },
          "The workers this rank's server went on without (on_peer_failure='continue').");
}

}  // namespace chorus::python
