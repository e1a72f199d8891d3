// The averaging schemes on a list of float32 arrays (a model's parameters,
// read and written where they are), with the C++ shape: begin_step,
// reduce_gradients, end_step, finish, stats. chorus.Topology for D-PSGD.
#include "binding.hpp"
#include "codecs.hpp"

#include <chorus/averaging/allreduce_sgd.hpp>
#include <chorus/averaging/dpsgd.hpp>
#include <chorus/averaging/easgd.hpp>
#include <chorus/averaging/easgd_async.hpp>
#include <chorus/averaging/gosgd.hpp>
#include <chorus/averaging/local_sgd.hpp>
#include <chorus/averaging/one_sided_gossip.hpp>
#include <chorus/averaging/parameter_server.hpp>
#include <chorus/averaging/topology.hpp>
#include <chorus/averaging/tree_easgd.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>

namespace chorus::python {

namespace {

namespace avg = chorus::averaging;

// A scheme with what it refers to: its own copy of the communicator (the
// synchronous schemes keep a reference) and the arrays it reads and writes.
template <class Scheme>
struct py_scheme {
  chorus::communicator comm;
  nb::object arrays;
  std::optional<Scheme> scheme;

  Scheme& get() {
    if (!scheme) throw error(errc::invalid_argument, "the scheme is closed");
    return *scheme;
  }
};

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
template <class Scheme>
nb::class_<py_scheme<Scheme>> scheme_class(nb::module_& m, const char* name, const char* doc) {
  using held = py_scheme<Scheme>;
  auto made = nb::class_<held>(m, name, doc);
  if constexpr (requires(Scheme& scheme) { scheme.leave(); })
    made.def(
        "leave", [](held& self) { without_gil([&] { self.get().leave(); }); },
        "Leaves the job on purpose, between steps, instead of finish(): this worker's share goes to the others.");
  return made
      .def(
          "begin_step", [](held& self) { without_gil([&] { self.get().begin_step(); }); },
          "Before the gradient: starts what overlaps it.")
      .def(
          "reduce_gradients", [](held& self) { without_gil([&] { self.get().reduce_gradients(); }); },
          "After the gradient, before the update: allreduce-SGD averages the gradients; the others pass.")
      .def(
          "end_step", [](held& self) { without_gil([&] { self.get().end_step(); }); },
          "After the update: the scheme's model step (mix, pull, push, average).")
      .def(
          "finish", [](held& self) { without_gil([&] { self.get().finish(); }); },
          "Collective: the parameters become the model to keep (average, centre, consensus).")
      .def_prop_ro(
          "stats", [](held& self) { return stats_of(self.get().stats()); },
          "steps, exchanges, merges, bytes_sent, messages_sent of this rank.")
      .def(
          "close", [](held& self) { without_gil([&] { self.scheme.reset(); }); },
          "Stops the scheme's threads (asynchronous schemes) without finishing.");
}

// Builds the scheme in place, with the GIL released (construction talks to
// the other ranks).
template <class Scheme, class... Args>
void construct(py_scheme<Scheme>* self, py_communicator& given, nb::handle arrays, Args&&... args) {
  new (self) py_scheme<Scheme>{given.get("averaging"), nb::borrow(arrays), std::nullopt};
  try {
    without_gil([&] { self->scheme.emplace(self->comm, std::forward<Args>(args)...); });
  } catch (...) {
    self->~py_scheme<Scheme>();
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
  scheme_class<avg::allreduce_sgd<chorus::communicator>>(m, "AllreduceSGD",
                                                         "Averages the gradients every step (synchronous).")
      .def(
          "__init__",
          [](py_scheme<avg::allreduce_sgd<chorus::communicator>>* self, py_communicator& comm, model_list params,
             model_list grads, nb::handle codec, std::size_t bucket_bytes) {
            avg::parameters model = parameters_of(params, "params");
            avg::parameters gradients = parameters_of(grads, "grads");
            construct(self, comm, nb::make_tuple(params, grads), std::move(model), std::move(gradients),
                      avg::allreduce_sgd_options{wire_of(codec), bucket_bytes});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("grads"), nb::arg("codec").none() = nb::none(),
          nb::arg("bucket_bytes") = 0);

  scheme_class<avg::local_sgd<chorus::communicator>>(m, "LocalSGD", "Averages the models every `period` steps.")
      .def(
          "__init__",
          [](py_scheme<avg::local_sgd<chorus::communicator>>* self, py_communicator& comm, model_list params,
             std::uint64_t period, std::uint64_t warmup_steps, nb::handle codec, std::size_t bucket_bytes) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model),
                      avg::local_sgd_options{period, warmup_steps, wire_of(codec), bucket_bytes});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("period") = 8, nb::arg("warmup_steps") = 0,
          nb::arg("codec").none() = nb::none(), nb::arg("bucket_bytes") = 0);

  scheme_class<avg::dpsgd<chorus::communicator>>(m, "DPSGD", "Mixes with the neighbours of a topology every step.")
      .def(
          "__init__",
          [](py_scheme<avg::dpsgd<chorus::communicator>>* self, py_communicator& comm, model_list params,
             std::optional<avg::topology> topology, nb::handle codec, bool one_sided) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model),
                      avg::dpsgd_options{std::move(topology), wire_of(codec), one_sided});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("topology").none() = nb::none(),
          nb::arg("codec").none() = nb::none(), nb::arg("one_sided") = false);

  using gossip = avg::one_sided_gossip<chorus::communicator>;
  scheme_class<gossip>(m, "OneSidedGossip",
                       "Push-sum gossip over a tensor window: accumulate into the out-neighbours' slots, never wait.")
      .def(
          "__init__",
          [](py_scheme<gossip>* self, py_communicator& comm, model_list params, std::optional<avg::topology> topology,
             nb::handle codec, const std::string& on_peer_failure) {
            avg::parameters model = parameters_of(params, "params");
            construct(
                self, comm, params, std::move(model),
                avg::one_sided_gossip_options{std::move(topology), wire_of(codec), policy_named(on_peer_failure)});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("topology").none() = nb::none(),
          nb::arg("codec").none() = nb::none(), nb::arg("on_peer_failure") = "raise")
      .def(
          "lost_peers", [](py_scheme<gossip>& self) { return lost_of(self.get().lost_peers()); },
          "The neighbours this rank went on without (on_peer_failure='continue').")
      .def(
          "quiesce", [](py_scheme<gossip>& self) { without_gil([&] { self.get().quiesce(); }); },
          "Collective: every push made before any rank's quiesce() is merged; the weights sum to the ranks.")
      .def_prop_ro(
          "weight", [](py_scheme<gossip>& self) { return self.get().weight(); },
          "This rank's push-sum weight p: sum(p * model) / sum(p) over the ranks is the consensus.");

  scheme_class<avg::easgd<chorus::communicator>>(m, "EASGD", "Synchronous elastic averaging around a centre.")
      .def(
          "__init__",
          [](py_scheme<avg::easgd<chorus::communicator>>* self, py_communicator& comm, model_list params, double alpha,
             std::uint64_t tau, nb::handle codec) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model), avg::easgd_options{alpha, tau, wire_of(codec)});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("alpha") = 0.05, nb::arg("tau") = 1,
          nb::arg("codec").none() = nb::none())
      .def(
          "centre", [](py_scheme<avg::easgd<chorus::communicator>>& self) { return numpy_array(self.get().centre()); },
          "A copy of the centre (every rank holds it).");

  scheme_class<avg::easgd_async<chorus::communicator>>(
      m, "EASGDAsync", "Asynchronous elastic averaging: workers pull from a server rank's centre.")
      .def(
          "__init__",
          [](py_scheme<avg::easgd_async<chorus::communicator>>* self, py_communicator& comm, model_list params,
             double alpha, std::uint64_t tau, int server, const std::string& on_peer_failure) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model),
                      avg::easgd_async_options{alpha, tau, server, policy_named(on_peer_failure)});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("alpha") = 0.05, nb::arg("tau") = 4, nb::arg("server") = 0,
          nb::arg("on_peer_failure") = "raise")
      .def(
          "lost_peers",
          [](py_scheme<avg::easgd_async<chorus::communicator>>& self) { return lost_of(self.get().lost_peers()); },
          "The workers the server went on without (on_peer_failure='continue').")
      .def(
          "centre",
          [](py_scheme<avg::easgd_async<chorus::communicator>>& self) { return numpy_array(self.get().centre()); },
          "A copy of the centre: the server's (empty on the workers).");

  scheme_class<avg::gosgd<chorus::communicator>>(m, "GoSGD", "Gossip: push the model to a random peer.")
      .def(
          "__init__",
          [](py_scheme<avg::gosgd<chorus::communicator>>* self, py_communicator& comm, model_list params,
             double push_probability, std::uint64_t seed, nb::handle codec, const std::string& on_peer_failure) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model),
                      avg::gosgd_options{push_probability, seed, wire_of(codec), policy_named(on_peer_failure)});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("push_probability") = 0.5, nb::arg("seed") = 1,
          nb::arg("codec").none() = nb::none(), nb::arg("on_peer_failure") = "raise")
      .def(
          "lost_peers",
          [](py_scheme<avg::gosgd<chorus::communicator>>& self) { return lost_of(self.get().lost_peers()); },
          "The peers this rank went on without (on_peer_failure='continue').")
      .def(
          "quiesce",
          [](py_scheme<avg::gosgd<chorus::communicator>>& self) { without_gil([&] { self.get().quiesce(); }); },
          "Collective: a consistent cut; every push sent before any rank's quiesce() is merged, none after, so "
          "the weights over the ranks sum to 1 until the next step.")
      .def_prop_ro(
          "weight", [](py_scheme<avg::gosgd<chorus::communicator>>& self) { return self.get().weight(); },
          "This rank's share of the consensus: sum(weight * model) over the ranks is the model to keep.");

  scheme_class<avg::tree_easgd<chorus::communicator>>(
      m, "TreeEASGD", "Elastic averaging on a tree of fan-out d; the root's model is kept.")
      .def(
          "__init__",
          [](py_scheme<avg::tree_easgd<chorus::communicator>>* self, py_communicator& comm, model_list params,
             double alpha, std::uint64_t tau_up, std::uint64_t tau_down, int fanout) {
            avg::parameters model = parameters_of(params, "params");
            construct(self, comm, params, std::move(model), avg::tree_easgd_options{alpha, tau_up, tau_down, fanout});
          },
          nb::arg("comm"), nb::arg("params"), nb::arg("alpha") = 0.05, nb::arg("tau_up") = 4, nb::arg("tau_down") = 4,
          nb::arg("fanout") = 2);

  using server = avg::parameter_server<chorus::communicator>;
  scheme_class<server>(m, "ParameterServer",
                       "Shards on server roles; workers push gradients and pull the model (bsp, ssp, downpour).")
      .def(
          "__init__",
          [](py_scheme<server>* self, py_communicator& comm, model_list params, model_list grads,
             const std::string& mode, std::uint64_t staleness, std::uint64_t push_every, std::uint64_t fetch_every,
             int dedicated_servers, double learning_rate, double momentum, bool nesterov,
             const std::string& on_peer_failure, bool fetch_by_get, bool push_by_accumulate) {
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
      .def_prop_ro("is_worker", [](py_scheme<server>& self) { return self.get().is_worker(); })
      .def(
          "set_learning_rate", [](py_scheme<server>& self, double rate) { self.get().set_learning_rate(rate); },
          nb::arg("rate"), "Scales this worker's pushes by rate / the servers' learning rate.")
      .def(
          "server_stats",
          [](py_scheme<server>& self) {
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
          "lost_peers", [](py_scheme<server>& self) { return lost_of(self.get().lost_peers()); },
          "The workers this rank's server went on without (on_peer_failure='continue').");
}

}  // namespace chorus::python
