// On real GPUs (ctest label `gpu`; scripts/test-gpu runs it): the NCCL
// communicator and its collectives on device memory, against the host
// allreduce of the same values. One rank runs wherever there is a GPU; 2
// ranks need 2 GPUs (NCCL does not put two ranks on one device). Without a
// device it exits 77, which ctest reports as skipped, with the reason.
#include <chorus/nccl/library.hpp>

#include "../support.hpp"

#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

int failures = 0;
std::mutex mutex;

void expect(bool ok, const char* what, int ranks, std::size_t count) {
  if (ok) return;
  std::lock_guard lock(mutex);
  ++failures;
  std::fprintf(stderr, "FAILED: %s (%d ranks, count %zu)\n", what, ranks, count);
}

// Values that sum exactly in float, in any order.
float value(int rank, std::size_t i) {
  return static_cast<float>(static_cast<int>((i * 7 + static_cast<std::size_t>(rank) * 13) % 97) - 48) / 8.0f;
}

void collectives(int ranks, std::size_t count) {
  chorus::run_threads(
      ranks,
      [&](chorus::communicator& comm) {
        chorus::nccl::options on_own_gpu;
        on_own_gpu.device = comm.rank();
        chorus::nccl::communicator gpus = chorus::nccl::connect(comm, on_own_gpu);
        std::vector<float> host(count), expected(count, 0.0f);
        for (std::size_t i = 0; i < count; ++i) {
          host[i] = value(comm.rank(), i);
          for (int r = 0; r < ranks; ++r) expected[i] += value(r, i);
        }
        float* device = nullptr;
        if (cudaMalloc(reinterpret_cast<void**>(&device), std::max<std::size_t>(count, 1) * sizeof(float)) !=
            cudaSuccess)
          return expect(false, "cudaMalloc", ranks, count);
        cudaMemcpy(device, host.data(), count * sizeof(float), cudaMemcpyHostToDevice);
        const auto ran = chorus::allreduce(gpus, std::span(device, count));
        expect(ran == chorus::algo::nccl, "allreduce reports nccl", ranks, count);
        std::vector<float> result(count);
        cudaMemcpy(result.data(), device, count * sizeof(float), cudaMemcpyDeviceToHost);
        expect(count == 0 || std::memcmp(result.data(), expected.data(), count * sizeof(float)) == 0, "allreduce sum",
               ranks, count);
        chorus::broadcast(gpus, std::span(device, count), ranks - 1);
        cudaFree(device);
      },
      chorus_test::quick());
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("skipped: no CUDA device (cudaGetDeviceCount reports none or fails)\n");
    return 77;
  }
  for (const std::size_t count : chorus_test::odd_counts) collectives(1, count);
  if (devices >= 2)
    for (const std::size_t count : chorus_test::odd_counts) collectives(2, count);
  else
    std::printf("nccl: 2 ranks not run: NCCL needs a GPU per rank and this machine has 1\n");
  std::printf("%s\n", failures == 0 ? "gpu nccl: all passed" : "gpu nccl: FAILED");
  return failures == 0 ? 0 : 1;
}
