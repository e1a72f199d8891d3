// Workers that join a running job (CHORUS_JOIN; averaging/admission.hpp),
// checked against closed forms. Run under `chorus-run -n N --join K@S`:
// the N ranks train until every joiner has entered, a few steps more, then
// finish(); each joiner trains 6 steps and finishes with them.
//
// Parameter server (rank 0 serves, SSP or Downpour pushing every 3 steps,
// plain SGD at rate 1/4): worker w pushes w in every element, so the
// model every rank ends on (the joiners' too) is, bit for bit, minus
// rate / W times every gradient every worker computed, joiners included,
// W the workers the job started with (each push applied once); a joiner's
// first model, the servers' shards as they were, is such a sum itself, shard
// by shard. Asynchronous EASGD: pulls conserve sum_i x_i + c, and a
// joiner brings its first model (the centre as it was), so the centre
// after finish() plus every rank's model before it must equal the start
// ((N + 1) times the server's), every step every rank took, and every
// joiner's first model.
//
// `die`: the one joiner introduces itself and takes its welcome, then
// dies (SIGKILL) before its first message: the job must not notice, under
// the default failure policy. `shared`: the parameter server with a shard
// on every rank (each admits the joiners). `leave`: GoSGD's rank 2 leaves
// on purpose once the joiners are in (its share goes to a peer, the
// weights of the ranks that stay, joiners included, still sum to 1).
//
//   scheme_join ps-ssp|ps-downpour|easgd|gosgd [ELEMENTS=4099] [die|shared|shared-die|leave]
//
// GoSGD (zero gradients, so only the averaging moves the models): after
// quiesce() the weights of every rank, joiners included, sum to 1 within
// 1e-12, and finish() ends every rank on the mean of the start's models
// (a joiner starts with weight 0, from rank 0's model and half its weight).
//
// Every rank publishes what the check needs in the job's store: a joiner
// shares no collective with the ranks of the start.
#include <chorus/chorus.hpp>

#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace avg = chorus::averaging;

namespace {

struct job {
  chorus::communicator& comm;
  int ranks;    // of the start
  int joiners;  // how many took a rank (one may have died)
  bool joined;
  int world_rank() const { return comm.transport().rank(); }
  chorus::store::connection& store() const { return *comm.store(); }
};

std::string key(std::string_view what, int rank) { return "test/" + std::string(what) + "/" + std::to_string(rank); }

void publish(const job& j, std::string_view what, const std::vector<double>& values) {
  j.store().set(key(what, j.world_rank()),
                std::string_view(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double)));
}

std::vector<double> read(const job& j, std::string_view what, int rank) {
  const std::string bytes = j.store().wait(key(what, rank), std::chrono::seconds(60));
  std::vector<double> values(bytes.size() / sizeof(double));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(double));
  return values;
}

// The joiners that entered (set test/joined); a joiner that died did not.
std::vector<int> entered(const job& j) {
  std::vector<int> ranks;
  const int taken = static_cast<int>(j.store().add("chorus/joiners", 0));
  for (int r = j.ranks; r < j.ranks + taken; ++r)
    if (j.store().get(key("joined", r))) ranks.push_back(r);
  return ranks;
}

// The ranks of the start train until every joiner has entered (or, with
// `die`, has introduced itself), then `extra` steps more; returns the steps.
template <class Step>
int train_until_joined(const job& j, bool die, int extra, Step&& step) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  int steps = 0;
  for (;;) {
    step();
    ++steps;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const int taken = static_cast<int>(j.store().add("chorus/joiners", 0));
    int arrived = 0;
    for (int r = j.ranks; r < j.ranks + taken; ++r)
      arrived += j.store().get(key(die ? "introduced" : "joined", r)).has_value();
    if (arrived >= j.joiners) break;
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("the joiners never arrived");
  }
  for (int s = 0; s < extra; ++s, ++steps) step();
  return steps;
}

// The dying joiner: it introduces itself to every server and takes its
// welcome (the servers now hold a slot for it), then dies.
[[noreturn]] void introduce_and_die(const job& j, std::string_view scheme, int contacts) {
  chorus::communicator group = avg::admission::enter(j.comm, scheme);
  std::vector<std::byte> welcome(1 << 20);
  for (int contact = 0; contact < contacts; ++contact) {
    auto taken = group.irecv(std::span(welcome), contact, avg::admission::welcome_tag);
    auto hello = avg::admission::introduce(group, contact);
    group.wait(hello);
    group.wait(taken);
  }
  j.store().set(key("introduced", j.world_rank()), "1");
  std::printf("rank %d: welcomed, dying before its first message: ok\n", j.world_rank());
  std::fflush(stdout);
  raise(SIGKILL);
  std::abort();
}

int parameter_server(const job& j, avg::consistency mode, std::size_t count, bool die, bool shared) {
  const int servers = shared ? j.ranks : 1;
  if (j.joined && die) introduce_and_die(j, "parameter_server", servers);
  std::vector<float> model(count, 0.0f), gradient(count, static_cast<float>(j.world_rank()));
  const int workers = shared ? j.ranks : j.ranks - 1;
  const int first_worker = shared ? 0 : 1;
  if ((workers & (workers - 1)) != 0)  // rate / W must be dyadic for the sums to be exact in any order
    throw std::invalid_argument("the parameter server check needs a power-of-two count of workers, not " +
                                std::to_string(workers));
  avg::parameter_server scheme(j.comm, avg::parameters{std::span<float>(model)},
                               avg::parameters{std::span<float>(gradient)},
                               {.mode = mode,
                                .staleness = 2,
                                .push_every = mode == avg::consistency::downpour ? 3u : 1u,
                                .dedicated_servers = shared ? 0 : 1,
                                .optimiser = {.learning_rate = 0.25, .momentum = 0.0}});
  const std::vector<float> first = model;  // a joiner's: every shard as its server held it
  if (j.joined) j.store().set(key("joined", j.world_rank()), "1");
  int steps = 0;
  if (j.joined)
    for (; steps < 6; ++steps) scheme.step([] {}, [] {});
  else if (scheme.is_worker())
    steps = train_until_joined(j, die, 4, [&] { scheme.step([] {}, [] {}); });
  publish(j, "steps", {static_cast<double>(steps)});
  scheme.finish();
  double expected = 0.0;  // every gradient of every worker, applied once at rate / W
  for (int w = first_worker; w < j.ranks; ++w) expected -= 0.25 / workers * read(j, "steps", w)[0] * w;
  const std::vector<int> joiners = entered(j);
  for (int r : joiners) expected -= 0.25 / workers * read(j, "steps", r)[0] * r;
  std::size_t wrong = 0;
  for (float value : model) wrong += value != static_cast<float>(expected);
  // A joiner's first model: in each shard the sum of the pushes its server had applied, the same in every
  // element of the shard, at most every push of the run.
  std::size_t bad_start = 0;
  for (int s = 0; j.joined && s < servers; ++s) {
    const std::size_t begin = count * static_cast<std::size_t>(s) / static_cast<std::size_t>(servers);
    const std::size_t end = count * static_cast<std::size_t>(s + 1) / static_cast<std::size_t>(servers);
    for (std::size_t i = begin; i < end; ++i)
      bad_start += first[i] != first[begin] || first[i] > 0.0f || first[i] < static_cast<float>(expected) ||
                   std::fmod(static_cast<double>(first[i]) * 16.0 * workers, 1.0) != 0.0;
  }
  const bool start_ok = bad_start == 0;
  const bool ok = wrong == 0 && start_ok && joiners.size() == static_cast<std::size_t>(die ? 0 : j.joiners);
  std::printf(
      "rank %d%s: parameter server (%s, %d servers), %zu joiner(s): %zu of %zu elements off %g, first model %zu "
      "off: %s\n",
      j.world_rank(), j.joined ? " (joined)" : "", std::string(avg::to_string(mode)).c_str(), servers, joiners.size(),
      wrong, model.size(), expected, bad_start, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

float initial(int rank, std::size_t index) { return static_cast<float>(rank * 7 + static_cast<int>(index % 13)); }
float step_of(int rank, std::size_t index) { return 0.125f * static_cast<float>((rank + 1) * (1 + index % 3)); }

int elastic(const job& j, std::size_t count, bool die) {
  if (j.joined && die) introduce_and_die(j, "easgd_async", 1);
  std::vector<float> model(count);
  for (std::size_t i = 0; i < count; ++i) model[i] = initial(j.world_rank(), i);
  avg::easgd_async scheme(j.comm, avg::parameters{std::span<float>(model)}, {.alpha = 0.3, .tau = 2, .server = 0});
  const auto step = [&] {
    for (std::size_t i = 0; i < count; ++i) model[i] += step_of(j.world_rank(), i);
  };
  if (j.joined) {
    publish(j, "first", std::vector<double>(model.begin(), model.end()));
    j.store().set(key("joined", j.world_rank()), "1");
  }
  int steps = 0;
  if (j.joined)
    for (; steps < 6; ++steps) scheme.step([] {}, step);
  else
    steps = train_until_joined(j, die, 4, [&] { scheme.step([] {}, step); });
  publish(j, "steps", {static_cast<double>(steps)});
  publish(j, "held", std::vector<double>(model.begin(), model.end()));  // x_i before finish() makes it the centre
  scheme.finish();
  if (j.world_rank() != 0) return 0;
  const std::vector<int> joiners = entered(j);
  std::vector<int> everyone;
  for (int r = 0; r < j.ranks; ++r) everyone.push_back(r);
  everyone.insert(everyone.end(), joiners.begin(), joiners.end());
  std::vector<double> expected(count), held(model.begin(), model.end());  // the centre
  for (std::size_t i = 0; i < count; ++i) expected[i] = (j.ranks + 1) * static_cast<double>(initial(0, i));
  for (int r : everyone) {
    const std::vector<double> theirs = read(j, "held", r);
    const double steps_r = read(j, "steps", r)[0];
    for (std::size_t i = 0; i < count; ++i) {
      held[i] += theirs[i];
      expected[i] += steps_r * static_cast<double>(step_of(r, i));
    }
  }
  for (int r : joiners) {
    const std::vector<double> first = read(j, "first", r);
    for (std::size_t i = 0; i < count; ++i) expected[i] += first[i];
  }
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < count; ++i) wrong += std::abs(held[i] - expected[i]) > 1e-4 * (1 + std::abs(expected[i]));
  const bool ok = wrong == 0 && joiners.size() == static_cast<std::size_t>(die ? 0 : j.joiners);
  std::printf("rank 0: easgd_async, %zu joiner(s): sum x + c conserved, %zu of %zu elements off: %s\n", joiners.size(),
              wrong, count, ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

int gossip(const job& j, std::size_t count, bool leave) {
  constexpr int leaver = 2;
  std::vector<float> model(count);
  for (std::size_t i = 0; i < count; ++i) model[i] = initial(j.world_rank(), i);
  avg::gosgd scheme(j.comm, avg::parameters{std::span<float>(model)}, {.push_probability = 0.8, .seed = 5});
  if (j.joined) j.store().set(key("joined", j.world_rank()), "1");
  if (j.joined)
    for (int step = 0; step < 6; ++step) scheme.step([] {}, [] {});
  else
    train_until_joined(j, false, 4, [&] { scheme.step([] {}, [] {}); });
  if (leave && j.world_rank() == leaver) {
    scheme.leave();
    std::printf("rank %d: left once the joiners were in, weight %.3g: ok\n", j.world_rank(), scheme.weight());
    return scheme.weight() == 0.0 ? 0 : 1;
  }
  scheme.quiesce();
  publish(j, "weight", {scheme.weight()});
  scheme.finish();
  const std::vector<int> joiners = entered(j);
  double total = 0;
  for (int r = 0; r < j.ranks; ++r)
    if (!(leave && r == leaver)) total += read(j, "weight", r)[0];
  for (int r : joiners) total += read(j, "weight", r)[0];
  std::size_t wrong = 0;  // off the mean of the start's models
  for (std::size_t i = 0; i < count; ++i) {
    double mean = 0;
    for (int r = 0; r < j.ranks; ++r) mean += initial(r, i);
    mean /= j.ranks;
    wrong += std::abs(model[i] - mean) > 1e-4 * (1 + std::abs(mean));
  }
  const bool ok = std::abs(total - 1.0) <= 1e-12 && wrong == 0 && joiners.size() == static_cast<std::size_t>(j.joiners);
  std::printf("rank %d%s: gosgd, %zu joiner(s): weights sum to 1 %+.3g, %zu of %zu elements off the mean: %s\n",
              j.world_rank(), j.joined ? " (joined)" : "", joiners.size(), total - 1.0, wrong, count,
              ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h") {
    std::printf(
        "usage: scheme_join ps-ssp|ps-downpour|easgd|gosgd [ELEMENTS] [die|shared|shared-die|leave]   (under "
        "chorus-run --join K@S)\n");
    return argc < 2 ? 2 : 0;
  }
  try {
    const std::string scheme = argv[1];
    const std::size_t count = argc > 2 ? std::stoul(argv[2]) : 4099;
    const std::string_view variant = argc > 3 ? argv[3] : "";
    const bool die = variant.find("die") != std::string_view::npos;
    const char* joiners = std::getenv("SCHEME_JOIN_JOINERS");
    chorus::communicator comm = chorus::init();
    const job j{comm, std::atoi(std::getenv("CHORUS_SIZE")), joiners ? std::atoi(joiners) : 1, comm.joined()};
    if (scheme == "ps-ssp")
      return parameter_server(j, avg::consistency::ssp, count, die, variant.find("shared") != std::string_view::npos);
    if (scheme == "ps-downpour")
      return parameter_server(j, avg::consistency::downpour, count, die,
                              variant.find("shared") != std::string_view::npos);
    if (scheme == "easgd") return elastic(j, count, die);
    if (scheme == "gosgd") return gossip(j, count, variant == "leave");
    std::fprintf(stderr, "scheme_join: unknown scheme %s\n", scheme.c_str());
    return 2;
  } catch (const std::exception& failure) {
    std::fprintf(stderr, "scheme_join: %s\n", failure.what());
    return 1;
  }
}
