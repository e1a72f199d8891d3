// This machine's memory bandwidth as the ranks of one host see it, and the
// reduction kernels against it: STREAM-like, every thread with arrays of
// its own (first touched by it), all threads at once, each figure from the
// slowest thread's time, the best of the rounds.
//
//   build/bench/memory_bound [--threads 2] [--sizes 64K,512K,4M,64M] [--rounds 5]
//
// Per size S (the bytes of one thread's array):
//   copy        memcpy(out, in, S)                 traffic 2 S (read, write)
//   reduce      out[i] = op(out[i], in[i])          traffic 3 S (read two, write one),
//               float sum at each vector width this CPU runs
//               (collective/machinery/reduce_local.hpp)
//   widen       S/2 bytes of half or bfloat16 into float, and narrow, the
//               other way (core/convert.hpp): how a half or bfloat16 call
//               enters and leaves its float accumulator; traffic 3/2 S
// Each as GB/s of traffic over all threads and, for the kernels, as a ratio
// to copy's GB/s: how near the kernel comes to moving its bytes as fast as
// memcpy moves the same number. bench/compare's allreduce bound is 2 S of
// traffic per rank at the fastest of these rates at that size.
#include <chorus/collective/machinery/reduce_local.hpp>
#include <chorus/core/bfloat16.hpp>
#include <chorus/core/convert.hpp>
#include <chorus/core/env.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/half.hpp>
#include <chorus/core/reduce_op.hpp>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace kernel = chorus::collective::kernel;

std::string to_text(chorus::simd::width w) { return std::string(chorus::simd::to_string(w)); }

struct settings {
  int threads = 2;
  std::vector<std::size_t> sizes{std::size_t{64} << 10, std::size_t{512} << 10, std::size_t{4} << 20,
                                 std::size_t{64} << 20};
  int rounds = 5;
};

std::vector<std::size_t> parse_sizes(std::string_view text) {
  std::vector<std::size_t> sizes;
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const auto size = chorus::env::parse_size(text.substr(0, comma));
    chorus::require(size && *size > 0, "bad size in '" + std::string(text) + "' (examples: 64K, 4M)");
    sizes.push_back(*size);
    text = comma == text.npos ? std::string_view{} : text.substr(comma + 1);
  }
  return sizes;
}

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (flag == "--threads")
      s.threads = std::stoi(argv[i + 1]);
    else if (flag == "--sizes")
      s.sizes = parse_sizes(argv[i + 1]);
    else if (flag == "--rounds")
      s.rounds = std::stoi(argv[i + 1]);
    else
      throw chorus::error(chorus::errc::invalid_argument,
                          "usage: memory_bound [--threads N] [--sizes 64K,64M] [--rounds R]");
  }
  chorus::require(s.threads >= 1 && s.rounds >= 1, "--threads and --rounds take positive counts");
  return s;
}

// One thread's arrays: `in` and `out` of S bytes, reinterpreted per test.
struct arrays {
  std::vector<std::byte> in, out;
  explicit arrays(std::size_t bytes) : in(bytes, std::byte{1}), out(bytes, std::byte{2}) {}
  template <class T>
  std::span<T> as(std::vector<std::byte>& bytes) {
    return {reinterpret_cast<T*>(bytes.data()), bytes.size() / sizeof(T)};
  }
};

using work = std::function<void(arrays&)>;

// Seconds per call of `once`, the slowest thread's, all threads running it
// together; repeated until about 0.1 s, best of the rounds.
double seconds(const settings& s, std::size_t bytes, const work& once) {
  const int repeats = static_cast<int>(std::clamp<std::size_t>((std::size_t{1} << 30) / bytes, 3, 20000));
  std::vector<double> slowest(static_cast<std::size_t>(s.rounds), 0);
  std::vector<double> each(static_cast<std::size_t>(s.threads));
  std::barrier meet(s.threads);
  std::vector<std::thread> threads;
  for (int t = 0; t < s.threads; ++t)
    threads.emplace_back([&, t] {
      arrays mine(bytes);
      once(mine);  // warm
      for (int round = 0; round < s.rounds; ++round) {
        meet.arrive_and_wait();
        const auto start = std::chrono::steady_clock::now();
        for (int r = 0; r < repeats; ++r) once(mine);
        each[static_cast<std::size_t>(t)] =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / repeats;
        meet.arrive_and_wait();
        if (t == 0) slowest[static_cast<std::size_t>(round)] = *std::max_element(each.begin(), each.end());
      }
    });
  for (std::thread& thread : threads) thread.join();
  return *std::min_element(slowest.begin(), slowest.end());
}

template <class T>
work reduce_at(kernel::width at) {
  return [at](arrays& a) {
    kernel::reduce_into_at(at, a.as<T>(a.out), std::span<const T>(a.as<T>(a.in)), chorus::op::sum{}, false);
  };
}

// S/2 bytes of a 16-bit type to S bytes of float (widen) or back (narrow).
template <class Narrow>
work widen() {
  return [](arrays& a) {
    const std::span<float> wide = a.as<float>(a.out);
    chorus::convert(std::span<const Narrow>(a.as<Narrow>(a.in).first(wide.size())), wide);
  };
}
template <class Narrow>
work narrow() {
  return [](arrays& a) {
    const std::span<const float> wide = a.as<float>(a.out);
    chorus::convert(wide, a.as<Narrow>(a.in).first(wide.size()));
  };
}

}  // namespace

int main(int argc, char** argv) try {
  const settings s = parse(argc, argv);
  const std::vector<kernel::width> widths = chorus::simd::runnable_widths();
  std::printf("# memory_bound: %d threads, best of %d rounds; GB/s of traffic over all threads (ratio to copy)\n",
              s.threads, s.rounds);
  std::printf("# %10s %-22s %10s %8s\n", "size(B)", "test", "GB/s", "vs copy");
  for (const std::size_t bytes : s.sizes) {
    const double threads = s.threads;
    const double copy = 2 * double(bytes) * threads / seconds(s, bytes, [bytes](arrays& a) {
                          std::memcpy(a.out.data(), a.in.data(), bytes);
                          asm volatile("" ::: "memory");
                        });
    std::printf("  %10zu %-22s %10.2f %8s\n", bytes, "copy", copy / 1e9, "1.00");
    const auto report = [&](const std::string& name, double traffic, const work& once) {
      const double rate = traffic * double(bytes) * threads / seconds(s, bytes, once);
      std::printf("  %10zu %-22s %10.2f %8.2f\n", bytes, name.c_str(), rate / 1e9, rate / copy);
    };
    for (const kernel::width w : widths) report(std::string("reduce float ") + to_text(w), 3, reduce_at<float>(w));
    report("widen half", 1.5, widen<chorus::half>());
    report("narrow half", 1.5, narrow<chorus::half>());
    report("widen bfloat16", 1.5, widen<chorus::bfloat16>());
    report("narrow bfloat16", 1.5, narrow<chorus::bfloat16>());
  }
  return 0;
} catch (const std::exception& failure) {
  std::fprintf(stderr, "memory_bound: %s\n", failure.what());
  return 1;
}
