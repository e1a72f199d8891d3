// DiLoCo with workers that die or leave (on_peer_failure = continue_).
//
//   chorus-run -n N --keep-going diloco_membership die SEED [FRAGMENTS=1] [OVERLAP=0] [CODEC]
//   chorus-run -n N diloco_membership leave RANKS [FRAGMENTS=1] [OVERLAP=0] [CODEC]
//   chorus-run -n N --join K@S diloco_membership join - [FRAGMENTS=1] [OVERLAP=0] [CODEC]   (DILOCO_JOINERS=K)
//
// Every rank r minimises |x - r|^2 / 2 by plain gradient steps (rate 0.1)
// on a model of three tensors of sizes that do not divide evenly, DiLoCo
// syncing every 4 steps (outer rate 0.7, Nesterov momentum 0.9), 60 steps,
// then finish(). CODEC (codec::by_name: int8, fp4_e2m1, ...) sends the outer
// gradients through it with error feedback, whose residual of the part of
// the sum each rank encodes must follow the group as it changes.
//
// die: the victim (SEED picks it, any rank) SIGKILLs itself at a random
// step, a random number of microseconds into it (so in its compute, its
// sync or its recovery). Every survivor must finish within the time
// limit, list the victim among its lost peers, and have committed the same
// syncs: after every sync count two survivors both saw, their global
// models are the same bits, and they end on the same count and model.
// leave: the ranks in RANKS call leave() at steps 20 + 7 k; the others
// lose nobody, end without them, and every rank (leavers too) saw the
// same global model after every sync count it shares with another.
//
// join: the ranks of the start train until the joiners have entered and
// 16 steps more, each joiner 16 steps; the global model a joiner entered
// with must be its peers' at that sync count, bit for bit, and every rank
// ends in one group with the same syncs.
//
// Each rank publishes (sync count, hash of the global model) after every
// step in the job's store; the check reads every other rank's.
#include <chorus/chorus.hpp>

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <random>
#include <stdexcept>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace avg = chorus::averaging;

namespace {

constexpr int steps = 60;
constexpr float rate = 0.1f;

using scheme_t = avg::diloco<chorus::communicator>;
using history = std::map<std::uint64_t, std::string>;  // sync count -> hashes of the global model's fragments

// The global model's hash, one per fragment (FNV-1a over the bits).
std::string hash_of(const scheme_t& scheme) {
  std::string hashes;
  for (std::size_t f = 0; f < scheme.fragments(); ++f) {
    std::uint64_t hash = 1469598103934665603ull;
    for (float value : scheme.global_model(f)) {
      std::uint32_t bits = 0;
      std::memcpy(&bits, &value, sizeof bits);
      hash = (hash ^ bits) * 1099511628211ull;
    }
    hashes += (f == 0 ? "" : ",") + std::to_string(hash);
  }
  return hashes;
}

std::string text_of(const history& seen) {
  std::string text;
  for (const auto& [count, hash] : seen) text += std::to_string(count) + ":" + hash + " ";
  return text;
}

history parse(const std::string& text) {
  history seen;
  std::stringstream in(text);
  for (std::string item; in >> item;) {
    const std::size_t colon = item.find(':');
    seen[std::stoull(item.substr(0, colon))] = item.substr(colon + 1);
  }
  return seen;
}

std::vector<int> ranks_in(const std::string& list) {
  std::vector<int> ranks;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) ranks.push_back(std::stoi(item));
  return ranks;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Differences between this rank's history and another's, on the counts both saw.
int compare(int rank, const history& mine, int other, const history& theirs) {
  int wrong = 0;
  for (const auto& [count, hash] : mine)
    if (const auto found = theirs.find(count); found != theirs.end() && found->second != hash) {
      if (wrong++ == 0)
        std::printf("rank %d: WRONG: after sync %llu its global model (%s) differs from rank %d's (%s)\n", rank,
                    static_cast<unsigned long long>(count), hash.c_str(), other, found->second.c_str());
    }
  return wrong;
}

// The store's WAIT fails once any rank has died: poll.
std::string poll(chorus::store::connection& store, const std::string& key, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (std::optional<std::string> value = store.get(key)) return *value;
    if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no '" + key + "' in the store");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "die";
  const std::string argument = argc > 2 ? argv[2] : "1";
  const std::size_t fragments = argc > 3 ? std::stoul(argv[3]) : 1;
  const std::uint64_t overlap = argc > 4 ? std::stoull(argv[4]) : 0;
  const chorus::codec::any_codec codec = argc > 5 ? chorus::codec::by_name(argv[5]) : chorus::codec::any_codec();
  chorus::communicator comm = chorus::init();
  const int rank = comm.transport().rank();                // a joiner's: the next free one
  const int size = std::atoi(std::getenv("CHORUS_SIZE"));  // the ranks of the start
  auto& store = *comm.store();

  std::mt19937 random(static_cast<unsigned>(mode == "die" ? std::stoul(argument) : 0));
  const int victim = std::uniform_int_distribution<int>(0, size - 1)(random);
  const int kill_step = std::uniform_int_distribution<int>(2, steps - 10)(random);
  const int kill_delay_us = std::uniform_int_distribution<int>(0, 3000)(random);
  const std::vector<int> leavers = mode == "leave" ? ranks_in(argument) : std::vector<int>{};
  const auto leave_index = std::find(leavers.begin(), leavers.end(), rank);
  const int leave_step = leave_index == leavers.end() ? -1 : 20 + 7 * static_cast<int>(leave_index - leavers.begin());

  std::vector<float> a(100'003, 0.0f), b(7, 0.0f), c(65'537, 0.0f);
  scheme_t scheme(comm, avg::parameters{std::span<float>(a), std::span<float>(b), std::span<float>(c)},
                  {.period = 4,
                   .codec = codec,
                   .fragments = fragments,
                   .overlap_steps = overlap,
                   .on_peer_failure = avg::peer_failure_policy::continue_});
  const auto started = std::chrono::steady_clock::now();
  history seen;
  const auto note = [&] { seen[scheme.syncs()] = hash_of(scheme); };
  note();  // a joiner: the global model it entered with, the one its peers had then
  if (comm.joined()) {
    std::printf("rank %d: joined after sync %llu\n", rank, static_cast<unsigned long long>(scheme.syncs()));
    store.set("diloco_membership/joined/" + std::to_string(rank), "1");
  }
  // join: the ranks of the start train until every joiner has entered, then 16 steps more; a joiner 16.
  int last_step = mode == "join" ? (comm.joined() ? 16 : 4000) : steps;
  const auto all_joined = [&] {
    const int joiners = std::atoi(std::getenv("DILOCO_JOINERS") ? std::getenv("DILOCO_JOINERS") : "1");
    int entered = 0;
    for (int r = size; r < size + 16; ++r) entered += store.get("diloco_membership/joined/" + std::to_string(r)).has_value();
    return entered >= joiners;
  };
  bool left = false;
  for (int step = 0; step < last_step && !left; ++step) {
    if (mode == "join" && !comm.joined() && last_step == 4000 && all_joined()) last_step = step + 16;
    if (mode == "die" && rank == victim && step == kill_step) {
      std::printf("rank %d: dies %d us into step %d\n", rank, kill_delay_us, step);
      std::fflush(stdout);
      std::thread([kill_delay_us] {
        std::this_thread::sleep_for(std::chrono::microseconds(kill_delay_us));
        ::kill(::getpid(), SIGKILL);
      }).detach();
    }
    for (std::span<float> tensor : {std::span<float>(a), std::span<float>(b), std::span<float>(c)})
      for (float& x : tensor) x -= rate * (x - static_cast<float>(rank));
    std::this_thread::sleep_for(std::chrono::microseconds(500));
    scheme.end_step();
    note();
    if (step == leave_step) {
      scheme.leave();
      note();
      left = true;
    }
  }
  if (!left) scheme.finish();
  note();
  const double seconds = seconds_since(started);

  store.set("diloco_membership/" + std::to_string(rank), text_of(seen));
  int wrong = 0;
  std::vector<int> others;  // whose histories must agree with this one's: those of the start, and its group's
  for (int r = 0; r < size; ++r)
    if (r != rank && !(mode == "die" && r == victim)) others.push_back(r);
  for (int r : scheme.group().world_ranks())
    if (r != rank && std::find(others.begin(), others.end(), r) == others.end()) others.push_back(r);
  for (int other : others) {
    const history theirs = parse(poll(store, "diloco_membership/" + std::to_string(other), comm.timeout()));
    wrong += compare(rank, seen, other, theirs);
    const bool both_finished = !left && std::find(leavers.begin(), leavers.end(), other) == leavers.end();
    if (both_finished && theirs.rbegin()->first != seen.rbegin()->first) {
      std::printf("rank %d: WRONG: it ended after %llu syncs, rank %d after %llu\n", rank,
                  static_cast<unsigned long long>(seen.rbegin()->first), other,
                  static_cast<unsigned long long>(theirs.rbegin()->first));
      ++wrong;
    }
  }
  const std::vector<avg::lost_peer> lost = scheme.lost_peers();
  const bool victim_listed =
      std::any_of(lost.begin(), lost.end(), [&](const avg::lost_peer& peer) { return peer.rank == victim; });
  if (mode == "die" && !victim_listed) {
    std::printf("rank %d: WRONG: rank %d is not among its lost peers\n", rank, victim);
    ++wrong;
  }
  if (mode == "leave" && !lost.empty()) {
    std::printf("rank %d: WRONG: it lost %zu peers, though none died\n", rank, lost.size());
    ++wrong;
  }
  const int joiners = mode == "join" ? std::atoi(std::getenv("DILOCO_JOINERS") ? std::getenv("DILOCO_JOINERS") : "1") : 0;
  const int expected_size = size + joiners - static_cast<int>(mode == "die" ? 1 : leavers.size());
  if (!left && scheme.group().size() != expected_size) {
    std::printf("rank %d: WRONG: it ended in a group of %d, not %d\n", rank, scheme.group().size(), expected_size);
    ++wrong;
  }
  const double limit = 3 * std::chrono::duration<double>(comm.timeout()).count() + 10.0;
  if (seconds > limit) {
    std::printf("rank %d: WRONG: %.2f s, over the limit of %.0f s\n", rank, seconds, limit);
    ++wrong;
  }
  if (wrong > 0 && std::getenv("DM_DEBUG")) std::printf("rank %d history: %s\n", rank, text_of(seen).c_str());
  std::printf("rank %d: %s: %llu syncs in %.2f s, group of %d, x[0] = %.4f, %zu lost\n", rank,
              wrong == 0 ? "ok" : "WRONG", static_cast<unsigned long long>(scheme.syncs()), seconds,
              scheme.group().size(), static_cast<double>(a[0]), lost.size());
  return wrong == 0 ? 0 : 1;
}
