// The device kernels and the staged allreduce against what the hardware
// allows, on one GPU (scripts/test-gpu runs it after the gpu tests):
//
//   gpu_kernels [--bytes N] [--repeats R] [--ranks P]
//
// 1. Every reduction and codec kernel of cuda/kernels.cuh over N bytes of
//    float (default 64 MiB), in GB/s of bytes read + written, next to
//    cudaMemcpy device-to-device of the same N bytes on the same buffers
//    (2N bytes moved: the HBM ceiling). Target: >= 80% of it.
// 2. The staged allreduce (cuda/device_allreduce.hpp) of N bytes on P ranks as
//    threads sharing the GPU, next to the host allreduce of the same bytes
//    in pinned memory plus the copies staging cannot hide (the first chunk
//    in, the last chunk out, at pinned copy bandwidth). Target: within 1.3x.
// Without a device it says so and exits 77 (skipped).
#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/comm/run_threads.hpp>
#include <chorus/cuda/device_allreduce.hpp>
#include <chorus/cuda/kernels.cuh>
#include <chorus/cuda/runtime.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace {

using chorus::cuda::detail::check;

struct settings {
  std::size_t bytes = 64u << 20;
  int repeats = 20;
  int ranks = 2;
};

settings parse(int argc, char** argv) {
  settings s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const unsigned long long value = std::strtoull(argv[i + 1], nullptr, 10);
    if (flag == "--bytes")
      s.bytes = static_cast<std::size_t>(value);
    else if (flag == "--repeats")
      s.repeats = static_cast<int>(value);
    else if (flag == "--ranks")
      s.ranks = static_cast<int>(value);
    else
      throw chorus::error(chorus::errc::invalid_argument, "unknown flag " + flag + " (--bytes, --repeats, --ranks)");
  }
  if (s.bytes < 4 || s.repeats < 1 || s.ranks < 1)
    throw chorus::error(chorus::errc::invalid_argument, "--bytes >= 4, --repeats >= 1, --ranks >= 1");
  return s;
}

// Median seconds of `work` enqueued on the default stream, timed by events.
double median_seconds(int repeats, const std::function<void()>& work) {
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  work();  // warm up
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    check(cudaEventRecord(start, nullptr), "cudaEventRecord");
    work();
    check(cudaEventRecord(stop, nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    times.push_back(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

template <class T>
T* device_array(std::size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes), "cudaMalloc");
  check(cudaMemset(p, 0, bytes), "cudaMemset");
  return static_cast<T*>(p);
}

void row(const char* name, double moved_bytes, double seconds, double ceiling) {
  const double gbps = moved_bytes / seconds / 1e9;
  std::printf("%-28s %10.1f %10.1f %8.0f%%\n", name, seconds * 1e6, gbps, 100.0 * gbps / ceiling);
}

void kernels(const settings& s) {
  namespace k = chorus::cuda::kernels;
  const std::size_t n = s.bytes / sizeof(float), bytes = n * sizeof(float);
  float* a = device_array<float>(bytes);
  float* b = device_array<float>(bytes);
  float* c = device_array<float>(bytes);
  std::byte* wire = device_array<std::byte>(bytes);

  const double copy = median_seconds(
      s.repeats, [&] { check(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, nullptr), "cudaMemcpyAsync"); });
  const double ceiling = 2.0 * bytes / copy / 1e9;
  std::printf("# %zu bytes (%zu floats), median of %d; GB/s of bytes read + written\n", bytes, n, s.repeats);
  std::printf("%-28s %10s %10s %9s\n", "kernel", "time(us)", "GB/s", "of copy");
  row("cudaMemcpy D2D", 2.0 * bytes, copy, ceiling);

  const auto reduction = [&](const char* name, auto op) {
    row(name, 3.0 * bytes, median_seconds(s.repeats, [&] { k::reduce_into(a, b, n, op, false); }), ceiling);
  };
  reduction("reduce float sum", chorus::op::sum{});
  reduction("reduce float prod", chorus::op::prod{});
  reduction("reduce float min", chorus::op::min{});
  reduction("reduce float max", chorus::op::max{});
  row("reduce double sum", 3.0 * bytes,
      median_seconds(s.repeats,
                     [&] {
                       k::reduce_into(reinterpret_cast<double*>(a), reinterpret_cast<const double*>(b), n / 2,
                                      chorus::op::sum{}, false);
                     }),
      ceiling);
  // n halves (the first half of a) into n floats: 2n bytes read, 4n written.
  row("widen half", 1.5 * bytes,
      median_seconds(s.repeats, [&] { k::widen(c, reinterpret_cast<const chorus::half*>(a), n); }), ceiling);

  const auto codec = [&](const std::string& name, const auto& codec) {
    const double encoded = static_cast<double>(codec.encoded_bytes(n));
    row((name + " encode").c_str(), bytes + encoded, median_seconds(s.repeats, [&] { k::encode(codec, a, wire, n); }),
        ceiling);
    row((name + " decode").c_str(), encoded + bytes, median_seconds(s.repeats, [&] { k::decode(codec, wire, b, n); }),
        ceiling);
    row((name + " decode_add").c_str(), encoded + 2.0 * bytes,
        median_seconds(s.repeats, [&] { k::decode_add(codec, wire, b, n); }), ceiling);
    // values + residual in, work and residual out, then encode and decode.
    row((name + " error feedback").c_str(), 6.0 * bytes + 2.0 * encoded,
        median_seconds(s.repeats, [&] { k::error_feedback_encode(codec, a, b, c, wire, n); }), ceiling);
  };
  codec("fp16", chorus::codec::fp16{});
  codec("bf16", chorus::codec::bf16{});
  codec("int8", chorus::codec::int8{});
  codec("onebit", chorus::codec::onebit{});
  for (void* p : {static_cast<void*>(a), static_cast<void*>(b), static_cast<void*>(c), static_cast<void*>(wire)})
    cudaFree(p);
}

double wall_median(int repeats, const std::function<void()>& work) {
  work();
  std::vector<double> times;
  for (int r = 0; r < repeats; ++r) {
    const auto start = std::chrono::steady_clock::now();
    work();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

void staged_allreduce(const settings& s) {
  const std::size_t n = s.bytes / sizeof(float), bytes = n * sizeof(float);
  const std::size_t chunk = std::min(bytes, chorus::cuda::staging_options{}.chunk_bytes);
  float* device = device_array<float>(bytes);
  float* pinned = nullptr;
  check(cudaMallocHost(reinterpret_cast<void**>(&pinned), bytes), "cudaMallocHost");
  const double in = median_seconds(s.repeats, [&] {
    check(cudaMemcpyAsync(pinned, device, bytes, cudaMemcpyDeviceToHost, nullptr), "cudaMemcpyAsync");
  });
  const double out = median_seconds(s.repeats, [&] {
    check(cudaMemcpyAsync(device, pinned, bytes, cudaMemcpyHostToDevice, nullptr), "cudaMemcpyAsync");
  });
  cudaFree(device);
  cudaFreeHost(pinned);
  std::printf("\n# pinned copies of %zu bytes: device->host %.1f GB/s, host->device %.1f GB/s\n", bytes,
              bytes / in / 1e9, bytes / out / 1e9);

  std::vector<double> host_times(static_cast<std::size_t>(s.ranks)), staged_times(host_times.size());
  chorus::run_threads(s.ranks, [&](chorus::communicator& comm) {
    float* mine = device_array<float>(bytes);
    float* host = nullptr;
    check(cudaMallocHost(reinterpret_cast<void**>(&host), bytes), "cudaMallocHost");
    std::fill_n(host, n, 1.0f);
    const auto r = static_cast<std::size_t>(comm.rank());
    host_times[r] = wall_median(s.repeats, [&] { chorus::allreduce(comm, std::span(host, n)); });
    staged_times[r] = wall_median(s.repeats, [&] {
      chorus::cuda::allreduce(comm, chorus::cuda::runtime(), std::span(mine, n));
      check(cudaStreamSynchronize(nullptr), "cudaStreamSynchronize");
    });
    cudaFree(mine);
    cudaFreeHost(host);
  });
  const double host_time = *std::max_element(host_times.begin(), host_times.end());
  const double staged = *std::max_element(staged_times.begin(), staged_times.end());
  const double exposed = host_time + chunk / (bytes / in) + chunk / (bytes / out);
  std::printf("# allreduce of %zu bytes, %d ranks on one GPU (slowest rank's median)\n", bytes, s.ranks);
  std::printf("host (pinned) allreduce      %10.1f us\n", host_time * 1e6);
  std::printf("+ first chunk in, last out   %10.1f us\n", exposed * 1e6);
  std::printf("staged allreduce             %10.1f us   %.2fx of that (target <= 1.3x)\n", staged * 1e6,
              staged / exposed);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const settings s = parse(argc, argv);
    if (!chorus::cuda::available()) {
      std::printf("skipped: no CUDA device (cudaGetDeviceCount fails or reports none)\n");
      return 77;
    }
    kernels(s);
    staged_allreduce(s);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_kernels: %s\n", e.what());
    return 1;
  }
}
