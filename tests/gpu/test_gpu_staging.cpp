// On a real GPU (ctest label `gpu`; scripts/test-gpu runs them): device
// buffers allocated with cudaMalloc go through the staged allreduce, ranks as
// threads sharing the GPU, and give the same bits as the host allreduce.
// Without a device it exits 77, which ctest reports as skipped, with the reason.
#include <chorus/cuda/device_allreduce.hpp>
#include <chorus/cuda/runtime.hpp>

#include "../support.hpp"

#include <cstdio>
#include <cstring>
#include <mutex>
#include <vector>

namespace {

int failures = 0;
std::mutex mutex;

void expect(bool ok, const char* what, std::size_t count) {
  if (ok) return;
  std::lock_guard lock(mutex);
  ++failures;
  std::fprintf(stderr, "FAILED: %s (count %zu)\n", what, count);
}

void staged_equals_host(int ranks, std::size_t count) {
  chorus::run_threads(
      ranks,
      [&](chorus::communicator& comm) {
        std::vector<float> host(count);
        for (std::size_t i = 0; i < count; ++i)
          host[i] = static_cast<float>((i * 7 + static_cast<std::size_t>(comm.rank()) * 13) % 101) * 0.37f;
        const std::vector<float> input = host;
        chorus::allreduce(comm, std::span(host));
        float* device = nullptr;
        if (cudaMalloc(reinterpret_cast<void**>(&device), std::max<std::size_t>(count, 1) * sizeof(float)) !=
            cudaSuccess) {
          expect(false, "cudaMalloc", count);
          return;
        }
        expect(chorus::cuda::memory_kind_of(device) == chorus::memory_kind::cuda_device, "memory kind of cudaMalloc",
               count);
        cudaMemcpy(device, input.data(), count * sizeof(float), cudaMemcpyHostToDevice);
        chorus::cuda::allreduce(comm, chorus::cuda::runtime(), std::span(device, count));
        std::vector<float> result(count);
        cudaMemcpy(result.data(), device, count * sizeof(float), cudaMemcpyDeviceToHost);
        cudaFree(device);
        expect(count == 0 || std::memcmp(result.data(), host.data(), count * sizeof(float)) == 0, "staged == host",
               count);
      },
      chorus_test::quick());
}

}  // namespace

int main() {
  if (!chorus::cuda::available()) {
    std::printf("skipped: no CUDA device (cudaGetDeviceCount reports none or fails)\n");
    return 77;
  }
  for (const int ranks : {1, 2, 3})
    for (const std::size_t count : chorus_test::odd_counts) staged_equals_host(ranks, count);
  std::printf("%s\n", failures == 0 ? "gpu staging: all passed" : "gpu staging: FAILED");
  return failures == 0 ? 0 : 1;
}
