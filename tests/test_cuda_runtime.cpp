// The CUDA runtime adapter where there may be no GPU: available() answers
// without crashing, memory kinds of host memory are host, and every call
// that needs a device is a chorus::error `unavailable` naming the CUDA
// error, never a crash. On a machine with a GPU the same checks hold for
// what a GPU makes possible (tests/gpu/ has the device tests proper).
#include <chorus/cuda/runtime.hpp>

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace cuda = chorus::cuda;

TEST_CASE("cuda runtime: memory kinds of host memory") {
  std::vector<float> heap(16);
  float stack = 0;
  CHECK(cuda::memory_kind_of(heap.data()) == chorus::memory_kind::host);
  CHECK(cuda::memory_kind_of(&stack) == chorus::memory_kind::host);
  CHECK(cuda::memory_kind_of(nullptr) == chorus::memory_kind::host);
  // With a device, the query leaves no error behind for the next CUDA call
  // (without a driver every call reports the missing driver anyway).
  if (cuda::available()) CHECK(cudaGetLastError() == cudaSuccess);
}

TEST_CASE("cuda runtime: without a device, calls are `unavailable`") {
  if (cuda::available()) {
    MESSAGE("a CUDA device is present: the no-device checks do not apply");
    CHECK_NOTHROW(cuda::runtime());
    return;
  }
  try {
    cuda::runtime();
    FAIL("runtime() returned without a device");
  } catch (const chorus::error& e) {
    CHECK(e.category() == chorus::errc::unavailable);
    CHECK(std::string(e.what()).find("no CUDA device") != std::string::npos);
  }
  cuda::runtime_operations operations;
  try {
    operations.allocate_pinned(4096);
    FAIL("cudaMallocHost succeeded without a device");
  } catch (const chorus::error& e) {
    CHECK(e.category() == chorus::errc::unavailable);
    CHECK(std::string(e.what()).find("cudaMallocHost") != std::string::npos);
    CHECK(std::string(e.what()).find("cudaError") != std::string::npos);  // the CUDA error's name
  }
  CHECK_THROWS_AS(operations.create_stream(), chorus::error);
  CHECK_THROWS_AS(operations.create_event(), chorus::error);
  CHECK_FALSE(cuda::available());  // asking again is as safe as the first time
}
