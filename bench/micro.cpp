// Google Benchmark microbenchmarks of chorus's pieces:
//   BM_reduce_kernel<T>      the local reduction kernel, GB/s of input consumed
//   BM_half_encode/decode    float <-> half and bfloat16 conversions, GB/s of floats
//   BM_allreduce/<algo>      each allreduce algorithm over N in-process ranks
//                            (threads over UCX), with algbw and busbw counters
//
//   build/bench/chorus-micro --benchmark_filter=allreduce
//
// The in-process ranks: rank 0 runs the benchmark loop; the other ranks run
// on helper threads and repeat the same collective the same number of times
// (Google Benchmark fixes the iteration count before each loop starts).
#include <chorus/chorus.hpp>

#include <benchmark/benchmark.h>

#include <atomic>
#include <barrier>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

namespace {

template <class T>
std::vector<T> random_values(std::size_t count) {
  std::mt19937 random(7);
  std::uniform_real_distribution<float> uniform(-4.0f, 4.0f);
  std::vector<T> values(count);
  for (auto& value : values) value = static_cast<T>(uniform(random));
  return values;
}

template <class T>
void BM_reduce_kernel(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  auto accumulate = random_values<T>(count);
  const auto incoming = random_values<T>(count);
  for (auto _ : state) {
    chorus::collective::reduce_into(std::span(accumulate), std::span<const T>(incoming), chorus::op::sum{}, true);
    benchmark::DoNotOptimize(accumulate.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * count * sizeof(T)));
}
BENCHMARK(BM_reduce_kernel<float>)->Arg(1 << 20);
BENCHMARK(BM_reduce_kernel<double>)->Arg(1 << 20);
BENCHMARK(BM_reduce_kernel<std::int32_t>)->Arg(1 << 20);
BENCHMARK(BM_reduce_kernel<std::int8_t>)->Arg(1 << 20);

template <class Narrow>
void BM_encode(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const auto input = random_values<float>(count);
  std::vector<Narrow> output(count);
  for (auto _ : state) {
    for (std::size_t i = 0; i < count; ++i) output[i] = Narrow(input[i]);
    benchmark::DoNotOptimize(output.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * count * sizeof(float)));
}
BENCHMARK(BM_encode<chorus::half>)->Name("BM_half_encode")->Arg(1 << 20);
BENCHMARK(BM_encode<chorus::bfloat16>)->Name("BM_bfloat16_encode")->Arg(1 << 20);

template <class Narrow>
void BM_decode(benchmark::State& state) {
  const auto count = static_cast<std::size_t>(state.range(0));
  const auto input = random_values<Narrow>(count);
  std::vector<float> output(count);
  for (auto _ : state) {
    for (std::size_t i = 0; i < count; ++i) output[i] = static_cast<float>(input[i]);
    benchmark::DoNotOptimize(output.data());
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * count * sizeof(float)));
}
BENCHMARK(BM_decode<chorus::half>)->Name("BM_half_decode")->Arg(1 << 20);
BENCHMARK(BM_decode<chorus::bfloat16>)->Name("BM_bfloat16_decode")->Arg(1 << 20);

// N ranks as threads, kept alive across benchmarks: rank 0 is the calling
// thread; helpers execute whatever job rank 0 posts, the same number of times.
class thread_ranks {
 public:
  explicit thread_ranks(int ranks) : ranks_(ranks), start_(ranks), finish_(ranks) {
    host_ = std::thread([this] {
      chorus::options quick;
      quick.timeout = std::chrono::milliseconds(60000);
      chorus::run_threads(ranks_, [this](chorus::communicator& comm) { serve(comm); }, quick);
    });
    std::unique_lock lock(mutex_);
    ready_.wait(lock, [this] { return rank0_ != nullptr; });
  }

  ~thread_ranks() {
    post([](chorus::communicator&) {}, 0, true);
    host_.join();
  }

  int size() const noexcept { return ranks_; }

  // Runs job(comm) `times` times on every rank; returns when all are done.
  void post(std::function<void(chorus::communicator&)> job, std::int64_t times, bool quit = false) {
    job_ = std::move(job);
    times_ = times;
    quit_ = quit;
    start_.arrive_and_wait();
    for (std::int64_t i = 0; i < times_; ++i) job_(*rank0_);
    finish_.arrive_and_wait();
  }

  chorus::communicator& rank0() { return *rank0_; }

 private:
  void serve(chorus::communicator& comm) {
    if (comm.rank() == 0) {
      {
        std::lock_guard lock(mutex_);
        rank0_ = &comm;
      }
      ready_.notify_all();
      // Rank 0's work is driven from post(); this thread only lends its communicator.
      std::unique_lock lock(mutex_);
      done_.wait(lock, [this] { return stopped_; });
      return;
    }
    for (;;) {
      start_.arrive_and_wait();
      const bool quit = quit_;
      for (std::int64_t i = 0; i < times_; ++i) job_(comm);
      finish_.arrive_and_wait();
      if (quit) {
        {
          std::lock_guard lock(mutex_);
          stopped_ = true;
        }
        done_.notify_all();
        return;
      }
    }
  }

  int ranks_;
  std::barrier<> start_, finish_;
  std::function<void(chorus::communicator&)> job_;
  std::int64_t times_ = 0;
  bool quit_ = false;
  std::mutex mutex_;
  std::condition_variable ready_, done_;
  chorus::communicator* rank0_ = nullptr;
  bool stopped_ = false;
  std::thread host_;
};

// Rank 0's communicator lives on the host's rank-0 thread but is driven
// from the benchmark thread; communicators are used by one thread at a time,
// which post() guarantees.
thread_ranks& ranks_of(int n) {
  static std::map<int, std::unique_ptr<thread_ranks>> pools;
  auto& pool = pools[n];
  if (!pool) pool = std::make_unique<thread_ranks>(n);
  return *pool;
}

void BM_allreduce(benchmark::State& state, chorus::algorithm algorithm) {
  const int n = static_cast<int>(state.range(0));
  const auto count = static_cast<std::size_t>(state.range(1)) / sizeof(float);
  thread_ranks& pool = ranks_of(n);
  std::vector<std::vector<float>> buffers(static_cast<std::size_t>(n), std::vector<float>(count, 1.0f));
  const auto job = [&](chorus::communicator& comm) {
    chorus::allreduce(comm, std::span(buffers[static_cast<std::size_t>(comm.rank())]), chorus::op::sum{}, algorithm);
  };
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) pool.post(job, 1);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double bytes = static_cast<double>(count * sizeof(float));
  const double algbw = bytes * static_cast<double>(state.iterations()) / seconds / 1e9;
  state.counters["algbw_GBps"] = algbw;
  state.counters["busbw_GBps"] = algbw * 2.0 * (n - 1) / n;
  state.SetLabel(std::string(chorus::to_string(algorithm)));
}

void allreduce_sizes(benchmark::internal::Benchmark* bench) {
  for (int ranks : {2, 3, 4})
    for (long bytes : {1L << 10, 64L << 10, 1L << 20, 16L << 20}) bench->Args({ranks, bytes});
  bench->UseRealTime();
}

BENCHMARK_CAPTURE(BM_allreduce, ring, chorus::algo::ring)->Apply(allreduce_sizes);
BENCHMARK_CAPTURE(BM_allreduce, rd, chorus::algo::recursive_doubling)->Apply(allreduce_sizes);
BENCHMARK_CAPTURE(BM_allreduce, rabenseifner, chorus::algo::rabenseifner)->Apply(allreduce_sizes);
BENCHMARK_CAPTURE(BM_allreduce, tree, chorus::algo::tree)->Apply(allreduce_sizes);

}  // namespace

BENCHMARK_MAIN();
