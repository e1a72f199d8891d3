// One rank of the randomized kill test (tests/kill_test): loops over a random
// mix of collectives, compressed collectives, point-to-point and averaging
// schemes until something fails, and reports how it ended.
//
//   chaos_rank REPORT_DIR SEED
//
// Every rank draws the same sequence of operations from SEED (they must call
// the same collectives), with random sizes from 0 elements to 4 Mi floats
// that rarely divide evenly. At start it writes "pid <pid>" to
// REPORT_DIR/rank<r>; when a chorus::error ends it, it appends
// "error <category> <wall-clock ns> <message>" and exits 3. Anything else
// (a crash, an abort, another exception) leaves no error line: the driver
// counts it as a crash. After 120 s without an error it exits 4.
#include <chorus/chorus.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace avg = chorus::averaging;

namespace {

struct chaos {
  chorus::communicator& comm;
  std::mt19937_64 shared;  // the same on every rank: which operation, which size
  std::vector<float> a, b;

  std::size_t random_count() {
    const int magnitude = std::uniform_int_distribution<int>(0, 22)(shared);
    if (magnitude == 0) return std::uniform_int_distribution<std::size_t>(0, 1)(shared);
    return std::uniform_int_distribution<std::size_t>(std::size_t{1} << (magnitude - 1),
                                                      std::size_t{1} << magnitude)(shared);
  }

  std::span<float> fill(std::vector<float>& buffer, std::size_t count) {
    buffer.assign(count, static_cast<float>(comm.rank() + 1));
    return buffer;
  }

  template <class Scheme>
  void train(Scheme&& scheme, int steps) {
    for (int step = 0; step < steps; ++step)
      scheme.step([] { std::this_thread::sleep_for(std::chrono::microseconds(300)); }, [] {});
    scheme.finish();
  }

  void scheme_round() {
    const std::size_t count = std::min<std::size_t>(random_count(), 1 << 18) + 1;
    const avg::parameters model{fill(a, count)};
    const avg::parameters grads{fill(b, count)};
    switch (std::uniform_int_distribution<int>(0, 5)(shared)) {
      case 0: return train(avg::gosgd(comm, model, {.push_probability = 0.5}), 8);
      case 1: return train(avg::dpsgd(comm, model), 6);
      case 2: return train(avg::easgd_async(comm, model, {.alpha = 0.1, .tau = 1, .server = 0}), 8);
      case 3: return train(avg::local_sgd(comm, model, {.period = 2}), 6);
      case 4: return train(avg::easgd(comm, model), 6);
      default: return train(avg::allreduce_sgd(comm, model, grads), 6);
    }
  }

  void one_operation() {
    const int n = comm.size();
    const std::size_t count = random_count();
    const auto per_rank = [&] { return count / static_cast<std::size_t>(n) + 1; };
    static constexpr chorus::algorithm algorithms[] = {chorus::algo::automatic, chorus::algo::ring, chorus::algo::rd,
                                                       chorus::algo::rabenseifner, chorus::algo::tree};
    switch (std::uniform_int_distribution<int>(0, 10)(shared)) {
      case 0:
      case 1: chorus::allreduce(comm, fill(a, count), chorus::op::sum{}, algorithms[shared() % 5]); return;
      case 2:
        chorus::broadcast(comm, fill(a, count), static_cast<int>(shared() % static_cast<std::uint64_t>(n)));
        return;
      case 3: {
        const std::size_t mine = per_rank();
        chorus::allgather(comm, std::span<const float>(fill(a, mine)), fill(b, mine * static_cast<std::size_t>(n)));
        return;
      }
      case 4: {
        const std::size_t block = per_rank();
        chorus::reduce_scatter(comm, std::span<const float>(fill(a, block * static_cast<std::size_t>(n))),
                               fill(b, block));
        return;
      }
      case 5: {
        const std::size_t total = per_rank() * static_cast<std::size_t>(n);
        chorus::alltoall(comm, std::span<const float>(fill(a, total)), fill(b, total));
        return;
      }
      case 6: chorus::barrier(comm); return;
      case 7: {  // point-to-point around the ring
        const int next = (comm.rank() + 1) % n, previous = (comm.rank() + n - 1) % n;
        std::span<float> incoming = fill(b, count);
        auto receive = comm.irecv(incoming, previous, 7);
        comm.send(fill(a, count), next, 7);
        comm.wait(receive, "ring exchange");
        return;
      }
      case 8:
        if (shared() % 2 == 0)
          chorus::allreduce(comm, fill(a, count), chorus::op::avg{}, chorus::codec::fp16{});
        else
          chorus::allreduce(comm, fill(a, count), chorus::op::avg{}, chorus::codec::int8{});
        return;
      case 9: {
        auto pending = chorus::iallreduce(comm, fill(a, count));
        pending.wait();
        return;
      }
      default: scheme_round(); return;
    }
  }
};

long long wall_clock_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || std::string(argv[1]) == "--help") {
    std::printf("usage: chaos_rank REPORT_DIR SEED   (one rank of tests/kill_test)\n");
    return argc == 2 ? 0 : 2;
  }
  const std::string directory = argv[1];
  const std::uint64_t seed = std::stoull(argv[2]);
  const char* rank_text = std::getenv("CHORUS_RANK");
  const std::string report_path = directory + "/rank" + (rank_text ? rank_text : "0");
  std::ofstream(report_path) << "pid " << ::getpid() << "\n" << std::flush;
  long long raised = 0;  // when the error was raised, before the communicator unwinds
  try {
    chorus::communicator comm = chorus::init();
    chaos job{comm, std::mt19937_64(seed), {}, {}};
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(120);
    try {
      while (std::chrono::steady_clock::now() < give_up) job.one_operation();
    } catch (const chorus::error&) {
      raised = wall_clock_ns();
      throw;
    }
    return 4;
  } catch (const chorus::error& failure) {
    // Teardown is timed by the driver: the process must end soon after.
    if (raised == 0) raised = wall_clock_ns();
    std::ofstream(report_path, std::ios::app)
        << "error " << chorus::to_string(failure.category()) << " " << raised << " " << failure.what() << "\n";
    return 3;
  }
}
