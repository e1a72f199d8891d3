// The NCCL library adapter where there may be no GPU: it compiles and links
// against NCCL, its type and op tables hold, and making a communicator with
// no device is a chorus::error (unavailable) naming CUDA's error and NCCL's
// answer, on every rank, never a crash or a hang. With a GPU, one rank
// makes a communicator (tests/gpu/test_gpu_nccl.cpp has the device tests).
#include <chorus/nccl/library.hpp>

#include "expect_error.hpp"
#include "support.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <string>

namespace nccl = chorus::nccl;
using namespace std::chrono_literals;

TEST_CASE("nccl library: every type chorus and NCCL share, every op") {
  CHECK(nccl::detail::nccl_type(chorus::dtype::float16) == ncclFloat16);
  CHECK(nccl::detail::nccl_type(chorus::dtype::bfloat16) == ncclBfloat16);
  CHECK(nccl::detail::nccl_type(chorus::dtype::uint64) == ncclUint64);
  CHECK(nccl::detail::nccl_type(chorus::dtype::int8) == ncclInt8);
  chorus_test::expect_error([] { nccl::detail::nccl_type(chorus::dtype::int16); }, chorus::errc::invalid_argument,
                            "NCCL has no int16");
  CHECK(nccl::detail::nccl_op(nccl::reduction::avg) == ncclAvg);
  CHECK(nccl::detail::nccl_op(nccl::reduction::min) == ncclMin);
  CHECK(nccl::library()->name().rfind("NCCL 2.", 0) == 0);
  std::vector<float> host(4);
  CHECK_FALSE(nccl::library()->moves(host.data()));  // host memory stays with UCX
}

TEST_CASE("nccl library: no device means a clear error on every rank") {
  if (chorus::cuda::available()) {
    MESSAGE("a CUDA device is present: the no-device checks do not apply");
    return;
  }
  for (int ranks : {1, 2}) {
    CAPTURE(ranks);
    std::atomic<int> failed{0};
    const auto start = std::chrono::steady_clock::now();
    chorus::run_threads(
        ranks,
        [&](chorus::communicator& comm) {
          try {
            nccl::communicator gpus = nccl::connect(comm);
            FAIL("an NCCL communicator without a device");
          } catch (const chorus::error& failure) {
            const std::string message = failure.what();
            CAPTURE(message);
            CHECK(failure.category() == chorus::errc::unavailable);
            CHECK(message.find("NCCL 2.") != std::string::npos);
            CHECK(message.find("cudaSetDevice: cudaError") != std::string::npos);
            CHECK(message.find("ncclCommInitRankConfig: nccl") != std::string::npos);
            ++failed;
          }
        },
        chorus_test::quick(20s));
    CHECK(failed.load() == ranks);
    CHECK(std::chrono::steady_clock::now() - start < 15s);  // failed at once, not at the timeout
  }
}
