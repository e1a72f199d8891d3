// Tensor-window put and get between ranks 0 and 1, next to chorus's own
// send/recv stream, 8 B to 64 MiB (bench/window_vs_ucx_perftest puts UCX's
// ucp_put_bw / ucp_get_bw beside it).
//
//   chorus-run -n 2 window_bench [--min 8] [--max 64M] [--factor 4]
//   chorus-run -n 2 gpu_window_bench ...     the tensors in device memory:
//       slots in device memory (the direct path; UCX's cuda_ipc between
//       processes on one GPU), what bench/gpu_vs_ucx_perftest sets beside
//       ucx_perftest -m cuda's put and get. Exit 77 without a GPU.
//
// put: rank 0 puts a tensor of SIZE bytes into rank 1's slot N times, then
// flushes (every entry landed): latency = time / N, bandwidth = SIZE N /
// time. get: rank 1 reads rank 0's published tensor N times. stream: N
// isends of SIZE bytes, 64 in flight, as ping_pong measures. Bandwidths in
// GB/s (10^9 bytes per second) of tensor bytes (an entry adds a 32-byte
// header). Each size is checked once: the slot must hold what was put.
#include <chorus/chorus.hpp>
#include <chorus/window.hpp>

#ifndef CHORUS_WINDOW_BENCH_GPU
#define CHORUS_WINDOW_BENCH_GPU 0
#endif
#if CHORUS_WINDOW_BENCH_GPU
#include <chorus/cuda/router.hpp>
#include <chorus/cuda/runtime.hpp>
namespace perf {
chorus::cuda::device_compute& device_kernels();  // tools/perf/device_kernels.cu
}  // namespace perf
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point start) {
  return std::chrono::duration<double>(clock_type::now() - start).count();
}

// The benchmark's tensor: host memory, or in gpu_window_bench device
// memory with the CUDA router installed (the window then keeps its slots
// there, or says why not under CHORUS_DEBUG).
class tensor {
 public:
  explicit tensor(const std::vector<float>& values) : host_(values) {
#if CHORUS_WINDOW_BENCH_GPU
    auto& ops = chorus::cuda::runtime().operations();
    device_ = static_cast<float*>(ops.allocate_device(values.size() * sizeof(float)));
    copy(device_, values.data(), values.size() * sizeof(float));
#endif
  }
  ~tensor() {
#if CHORUS_WINDOW_BENCH_GPU
    chorus::cuda::runtime().operations().free_device(device_);
#endif
  }
  tensor(const tensor&) = delete;
  tensor& operator=(const tensor&) = delete;

  std::span<const float> values() const {
#if CHORUS_WINDOW_BENCH_GPU
    return {device_, host_.size()};
#else
    return host_;
#endif
  }
  // A span the window handed out, in host memory.
  static std::vector<float> read(std::span<const float> from) {
#if CHORUS_WINDOW_BENCH_GPU
    std::vector<float> out(from.size());
    copy(out.data(), from.data(), from.size_bytes());
    return out;
#else
    return {from.begin(), from.end()};
#endif
  }

 private:
#if CHORUS_WINDOW_BENCH_GPU
  static void copy(void* to, const void* from, std::size_t bytes) {
    auto& ops = chorus::cuda::runtime().operations();
    ops.copy_async(to, from, bytes, nullptr);
    const chorus::cuda::event_handle done = ops.create_event();
    ops.record(done, nullptr);
    while (!ops.completed(done)) {}
    ops.destroy_event(done);
  }
  float* device_ = nullptr;
#endif
  std::vector<float> host_;
};

struct result {
  double put = 0, get = 0, stream = 0;  // seconds per operation
  std::size_t wrong = 0;
};

result measure(chorus::communicator& comm, std::size_t bytes, int iterations) {
  const std::size_t elements = std::max<std::size_t>(1, bytes / sizeof(float));
  std::vector<float> values(elements);
  for (std::size_t k = 0; k < elements; ++k) values[k] = static_cast<float>(k % 1000) + 0.5f;
  const tensor model(values);
  const bool writer = comm.rank() == 0;
  chorus::window win(comm, model.values(), {.sources = writer ? std::vector<int>{} : std::vector<int>{0}});
  result timed;
  // Check once: what rank 1's slot holds is what rank 0 put.
  if (writer) {
    win.put(model.values());
    win.flush();  // landed: a barrier does not order it
  }
  comm.barrier();
  if (!writer)
    win.collect([&](int, std::span<const float> slot, double) {
      const std::vector<float> got = tensor::read(slot);
      for (std::size_t k = 0; k < elements; ++k) timed.wrong += got[k] != values[k];
    });
  comm.barrier();
  if (writer) {
    win.put(model.values());  // warm-up
    win.flush();
    const auto start = clock_type::now();
    for (int i = 0; i < iterations; ++i) win.put(model.values());
    win.flush();
    timed.put = seconds_since(start) / iterations;
  }
  comm.barrier();
  if (!writer) {
    win.get();  // warm-up
    const auto start = clock_type::now();
    for (int i = 0; i < iterations; ++i) win.get();
    timed.get = seconds_since(start) / iterations;
  }
  comm.barrier();
  // The same bytes by send/recv, 64 in flight.
  constexpr int in_flight = 64;
  std::vector<chorus::communicator::request> requests(in_flight);
  const auto start = clock_type::now();
  for (int i = 0; i < iterations; ++i) {
    auto& slot = requests[static_cast<std::size_t>(i % in_flight)];
    if (i >= in_flight) comm.wait(slot, "stream");
    slot = writer ? comm.isend(std::span<const float>(values), 1, 1) : comm.irecv(std::span<float>(values), 0, 1);
  }
  comm.wait_all(requests, "stream");
  std::byte ack{};
  if (writer)
    comm.recv(std::span(&ack, 1), 1, 2);
  else
    comm.send(std::span<const std::byte>(&ack, 1), 0, 2);
  timed.stream = seconds_since(start) / iterations;
  double shared[3] = {timed.put, timed.get, static_cast<double>(timed.wrong)};
  chorus::allreduce(comm, std::span<double>(shared), chorus::op::sum{});
  timed.put = shared[0];
  timed.get = shared[1];
  timed.wrong = static_cast<std::size_t>(shared[2]);
  comm.barrier();
  win.free();
  return timed;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t min_bytes = 8, max_bytes = 64u << 20, factor = 4;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::printf(
          "usage: window_bench [--min BYTES] [--max BYTES] [--factor F]   (chorus-run -n 2 window_bench)\n"
          "Window put and get latency and bandwidth, and send/recv streaming, between ranks 0 and 1.\n");
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "window_bench: %s needs a value\n", argv[i]);
      return 2;
    }
    const auto value = chorus::env::parse_size(argv[++i]);
    if (!value || *value == 0) {
      std::fprintf(stderr, "window_bench: bad size %s\n", argv[i]);
      return 2;
    }
    (flag == "--min" ? min_bytes : flag == "--max" ? max_bytes : factor) = *value;
  }
  try {
#if CHORUS_WINDOW_BENCH_GPU
    if (!chorus::cuda::available()) {
      std::printf("gpu_window_bench: no CUDA device here\n");
      return 77;
    }
    chorus::cuda::router router(chorus::cuda::runtime(), {}, &perf::device_kernels());
    const chorus::cuda::route_front_doors routing(router);
#endif
    chorus::communicator comm = chorus::init();
    if (comm.size() != 2) {
      std::fprintf(stderr, "window_bench runs on 2 ranks (chorus-run -n 2 window_bench)\n");
      return 2;
    }
    if (comm.rank() == 0)
      std::printf(
          "# chorus window (%s): rank 0 puts into rank 1, rank 1 gets from rank 0\n%12s %8s %10s %10s %10s %10s "
          "%12s %7s\n",
          CHORUS_WINDOW_BENCH_GPU ? "device tensors" : "host tensors", "size(B)", "iters", "put(us)", "put(GB/s)", "get(us)", "get(GB/s)", "stream(GB/s)", "#wrong");
    std::size_t wrong = 0;
    for (std::size_t bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
      const int iterations = static_cast<int>(std::clamp<std::size_t>((512u << 20) / bytes, 8, 20000));
      const result timed = measure(comm, bytes, iterations);
      wrong += timed.wrong;
      if (comm.rank() == 0) {
        const double b = static_cast<double>(bytes);
        std::printf("%12zu %8d %10.2f %10.3f %10.2f %10.3f %12.3f %7zu\n", bytes, iterations, timed.put * 1e6,
                    b / timed.put / 1e9, timed.get * 1e6, b / timed.get / 1e9, b / timed.stream / 1e9, timed.wrong);
        std::fflush(stdout);
      }
      if (bytes > max_bytes / factor) break;
    }
    return wrong == 0 ? 0 : 1;
  } catch (const chorus::error& failure) {
    std::fprintf(stderr, "window_bench: %s\n", failure.what());
    return 1;
  }
}
