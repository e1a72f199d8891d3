// The direct path on the fake device: device buffers go to the transport as
// they are (the fake hands UCX its host alias, standing in for a UCX that
// moves CUDA memory) and the ring's reductions run as work on the fake
// device's streams, so any host access to a device pointer still crashes.
// Checked: the choice of path (CHORUS_CUDA_PATH, transport, kernels, call),
// results bit for bit equal to the host allreduce, no staging copies on the
// direct path, and the calls it leaves to the staged path.
#include "expect_error.hpp"
#include "fake_compute.hpp"
#include "fake_device.hpp"
#include "support.hpp"
#include "window_rounds.hpp"

#include <chorus/averaging/dpsgd.hpp>
#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/collective/reduce/reduce.hpp>
#include <chorus/compressed/compressed_allgather.hpp>
#include <chorus/compressed/compressed_allreduce.hpp>
#include <chorus/cuda/path.hpp>
#include <chorus/cuda/router.hpp>

#include <doctest/doctest.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace {

using chorus::cuda::path_facts;
using chorus::cuda::path_setting;
using chorus_test::fake_compute;
using chorus_test::fake_device;

// What each case starts from: a fake device, its kernels, and a router over
// it (small staging chunks: several per buffer).
inline constexpr bool without_kernels = false;

struct fake_gpu {
  explicit fake_gpu(path_setting path, bool with_kernels = true)
      : router(gpu, {4096, 3}, with_kernels ? &kernels : nullptr, path) {}

  fake_device fake;
  chorus::cuda::device gpu{fake};
  fake_compute kernels{fake};
  chorus::cuda::router router;
};

template <class T>
std::vector<T> inputs(int rank, std::size_t count) {
  std::vector<T> values(count);
  for (std::size_t i = 0; i < count; ++i)
    values[i] = static_cast<T>(static_cast<float>((i * 7 + static_cast<std::size_t>(rank) * 13) % 101) * 0.37f - 9.0f);
  return values;
}

// Every rank allreduces its inputs on the fake device through `router` and
// on the host; returns how many ranks' device results differ in any bit.
template <class T, class Op>
int differing(fake_device& fake, chorus::cuda::router& router, int ranks, std::size_t count, Op op,
              chorus::algorithm forced = chorus::algorithm::automatic) {
  std::atomic<int> differ{0};
  const chorus::cuda::route_front_doors routing(router);
  chorus::run_threads(
      ranks,
      [&](chorus::communicator& comm) {
        std::vector<T> host = inputs<T>(comm.rank(), count);
        auto* device = static_cast<T*>(fake.allocate_device(count * sizeof(T)));
        fake.write(device, std::span<const T>(host));
        // The host runs what ran on the device (automatic on the host would
        // pick shared memory, which the table keeps device buffers off).
        const chorus::algorithm used = chorus::allreduce(comm, std::span(device, count), op, forced);
        chorus::allreduce(comm, std::span(host), op, used);
        const std::vector<T> result = fake.read(device, count);
        fake.free_device(device);
        if (count > 0 && std::memcmp(result.data(), host.data(), count * sizeof(T)) != 0) ++differ;
      },
      chorus_test::quick());
  return differ.load();
}

}  // namespace

TEST_CASE("cuda path: staged or direct, and why") {
  const path_facts all{true, true, true};
  CHECK(chorus::cuda::choose_path(path_setting::automatic, all).direct);
  CHECK(chorus::cuda::choose_path(path_setting::direct, all).direct);
  CHECK_FALSE(chorus::cuda::choose_path(path_setting::staged, all).direct);
  CHECK(chorus::cuda::choose_path(path_setting::staged, all).reason.find("CHORUS_CUDA_PATH=staged") !=
        std::string::npos);

  const auto without_network = chorus::cuda::choose_path(path_setting::automatic, {false, true, true});
  CHECK_FALSE(without_network.direct);
  CHECK(without_network.reason.find("host memory only") != std::string::npos);
  const auto without_kernels = chorus::cuda::choose_path(path_setting::automatic, {true, false, false});
  CHECK_FALSE(without_kernels.direct);
  CHECK(without_kernels.reason.find("no device kernels") != std::string::npos);
  CHECK_FALSE(chorus::cuda::choose_path(path_setting::automatic, {true, true, false}).direct);
  CHECK_FALSE(chorus::cuda::choose_path(path_setting::direct, {true, true, false}).direct);  // this call only

  // Forced where it cannot be had: a clear error, not a silent fallback.
  chorus_test::expect_error([] { chorus::cuda::choose_path(path_setting::direct, {false, true, true}); },
                            chorus::errc::unavailable, "UCX reports no CUDA memory support");
  chorus_test::expect_error([] { chorus::cuda::choose_path(path_setting::direct, {true, false, false}); },
                            chorus::errc::unavailable, "no device kernels");
}

TEST_CASE("cuda path: CHORUS_CUDA_PATH is read, and a bad value is refused") {
  ::unsetenv("CHORUS_CUDA_PATH");
  CHECK(chorus::cuda::path_from_environment() == path_setting::automatic);
  ::setenv("CHORUS_CUDA_PATH", "direct", 1);
  CHECK(chorus::cuda::path_from_environment() == path_setting::direct);
  ::setenv("CHORUS_CUDA_PATH", "staged", 1);
  CHECK(chorus::cuda::path_from_environment() == path_setting::staged);
  ::setenv("CHORUS_CUDA_PATH", "fast", 1);
  chorus_test::expect_error([] { chorus::cuda::path_from_environment(); }, chorus::errc::invalid_argument,
                            "CHORUS_CUDA_PATH");
  ::unsetenv("CHORUS_CUDA_PATH");
}

TEST_CASE("direct path: every allreduce algorithm on device buffers equals the host's, with no staging copies") {
  fake_gpu setup(path_setting::automatic);
  auto& [fake, gpu, kernels, router] = setup;
  for (const int ranks : {1, 2, 3, 5})
    for (const std::size_t count :
         {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{99991}}) {
      CAPTURE(ranks);
      CAPTURE(count);
      for (const auto algorithm : {chorus::algorithm::ring, chorus::algorithm::tree,
                                   chorus::algorithm::recursive_doubling, chorus::algorithm::rabenseifner}) {
        CAPTURE(algorithm);
        CHECK(differing<float>(fake, router, ranks, count, chorus::op::sum{}, algorithm) == 0);
        CHECK(differing<double>(fake, router, ranks, count, chorus::op::avg{}, algorithm) == 0);
        CHECK(differing<std::int32_t>(fake, router, ranks, count, chorus::op::max{}, algorithm) == 0);
        CHECK(differing<std::int64_t>(fake, router, ranks, count, chorus::op::prod{}, algorithm) == 0);
      }
    }
  CHECK(fake.copies() == 0);  // nothing was staged
  CHECK(kernels.launches.load() > 0);
}

TEST_CASE("direct path: the registry's choice runs direct; half, bfloat16 and user ops are staged") {
  fake_gpu setup(path_setting::automatic);
  auto& [fake, gpu, kernels, router] = setup;
  // 64 MiB of float is above every ring threshold of the registry: direct.
  CHECK(differing<float>(fake, router, 3, (64u << 20) / 4 + 5, chorus::op::sum{}) == 0);
  CHECK(fake.copies() == 0);
  // The registry's choice for a small buffer (not the ring): direct too.
  CHECK(differing<float>(fake, router, 3, 100, chorus::op::sum{}) == 0);
  CHECK(fake.pinned_allocations() == 0);
  // half and bfloat16 accumulate in float: staged.
  CHECK(differing<chorus::half>(fake, router, 3, 1000, chorus::op::sum{}, chorus::algorithm::ring) == 0);
  const std::size_t after_half = fake.copies();
  CHECK(after_half > 0);
  CHECK(differing<chorus::bfloat16>(fake, router, 3, 1000, chorus::op::sum{}, chorus::algorithm::recursive_doubling) ==
        0);
  CHECK(fake.copies() > after_half);
  // A user's op has no device kernel: staged.
  const auto user = [](float a, float b) { return a + b; };
  const std::size_t before_user = fake.copies();
  CHECK(differing<float>(fake, router, 2, 1000, user, chorus::algorithm::ring) == 0);
  CHECK(fake.copies() > before_user);
}

TEST_CASE("direct path: one rank direct, one staged, one on the host meet in the same ring") {
  fake_device fake;
  chorus::cuda::device gpu(fake);
  fake_compute kernels(fake);
  chorus::cuda::router direct(gpu, {4096, 3}, &kernels, path_setting::direct);
  chorus::cuda::router staged(gpu, {4096, 3}, &kernels, path_setting::staged);
  const std::size_t count = 50000;
  std::atomic<int> differ{0};
  chorus::run_threads(
      3,
      [&](chorus::communicator& comm) {
        std::vector<float> host = inputs<float>(comm.rank(), count);
        std::vector<float> expected = host;
        auto* device = static_cast<float*>(fake.allocate_device(count * sizeof(float)));
        fake.write(device, std::span<const float>(host));
        if (comm.rank() == 0)
          chorus::collective::allreduce_through(direct, comm, std::span(device, count), chorus::op::sum{},
                                                chorus::algorithm::ring);
        else if (comm.rank() == 1)
          chorus::collective::allreduce_through(staged, comm, std::span(device, count), chorus::op::sum{},
                                                chorus::algorithm::ring);
        else
          chorus::allreduce(comm, std::span(host), chorus::algorithm::ring);
        chorus::allreduce(comm, std::span(expected), chorus::algorithm::ring);
        const std::vector<float> result = comm.rank() == 2 ? host : fake.read(device, count);
        fake.free_device(device);
        if (std::memcmp(result.data(), expected.data(), count * sizeof(float)) != 0) ++differ;
      },
      chorus_test::quick());
  CHECK(differ.load() == 0);
}

TEST_CASE("direct path: forced where the transport cannot reach device memory is a clear error") {
  fake_device fake;
  fake.set_network_reaches(false);
  chorus::cuda::device gpu(fake);
  fake_compute kernels(fake);
  chorus::cuda::router forced(gpu, {4096, 3}, &kernels, path_setting::direct);
  chorus::cuda::router automatic(gpu, {4096, 3}, &kernels, path_setting::automatic);
  // auto: staged, same bits.
  CHECK(differing<float>(fake, automatic, 2, 5000, chorus::op::sum{}, chorus::algorithm::ring) == 0);
  CHECK(fake.copies() > 0);
  // Two ranks: one alone moves nothing (its allreduce leaves the buffer as it is).
  chorus::run_threads(
      2,
      [&](chorus::communicator& comm) {
        auto* device = static_cast<float*>(fake.allocate_device(64 * sizeof(float)));
        chorus_test::expect_error(
            [&] {
              chorus::collective::allreduce_through(forced, comm, std::span(device, 64), chorus::op::sum{},
                                                    chorus::algorithm::ring);
            },
            chorus::errc::unavailable, "CHORUS_CUDA_PATH=direct");
        fake.free_device(device);
      },
      chorus_test::quick());
}

TEST_CASE("direct path: staged where UCX moves no CUDA memory or registers the buffer as host memory, and says why") {
  // The two questions the direct path asks of UCX (ucp_context_query, then
  // ucp_mem_query of the buffer itself): each refusal alone stages the call.
  struct refusal {
    bool context_moves_cuda;
    const char* reason;
  };
  for (const refusal refused : {refusal{false, "UCX reports no CUDA memory support"},
                                refusal{true, "UCX registers this buffer as host memory (ucp_mem_query)"}}) {
    CAPTURE(refused.reason);
    fake_gpu setup(path_setting::automatic);
    auto& [fake, gpu, kernels, router] = setup;
    fake.set_network_reaches(refused.context_moves_cuda);
    fake.set_registered_as_device(false);
    chorus::cuda::router forced(gpu, {4096, 3}, &kernels, path_setting::direct);
    // Staged: copies through pinned memory, the host's bits, at 1, 2 and 3 ranks.
    for (const int ranks : {1, 2, 3}) {
      CHECK(differing<float>(fake, router, ranks, 5003, chorus::op::sum{}, chorus::algorithm::ring) == 0);
      CHECK(differing<std::int32_t>(fake, router, ranks, 7, chorus::op::max{}, chorus::algorithm::tree) == 0);
    }
    CHECK(fake.copies() > 0);
    CHECK(fake.pinned_allocations() > 0);
    CHECK(kernels.launches.load() == 0);  // the host reduced
    // The second question is asked only where the first said yes.
    CHECK((fake.registration_questions() > 0) == refused.context_moves_cuda);
    chorus::run_threads(
        2,
        [&](chorus::communicator& comm) {
          auto* device = static_cast<float*>(fake.allocate_device(64 * sizeof(float)));
          const chorus::routed_buffer view{device, 64 * sizeof(float), chorus::buffer_use::read_write};
          const chorus::path_report path =
              router.direct_path(view, chorus::dtype::float32, "sum", chorus::network_of(comm));
          CHECK_FALSE(path.direct);
          CHECK(path.reason.find(refused.reason) != std::string::npos);
          // Forced direct: a clear error naming the refusal, on every rank, not a fallback.
          chorus_test::expect_error(
              [&] {
                chorus::collective::allreduce_through(forced, comm, std::span(device, 64), chorus::op::sum{},
                                                      chorus::algorithm::ring);
              },
              chorus::errc::unavailable, refused.reason);
          fake.free_device(device);
        },
        chorus_test::quick());
  }
  // Both answers yes (the default fake): direct, and the buffer was asked about.
  fake_gpu setup(path_setting::automatic);
  CHECK(differing<float>(setup.fake, setup.router, 3, 5003, chorus::op::sum{}, chorus::algorithm::ring) == 0);
  CHECK(setup.fake.copies() == 0);
  CHECK(setup.fake.registration_questions() > 0);
}

namespace {

// reduce_scatter, allgather out of place and in place on the fake device
// through `router` and on the host, forced to the ring or to recursive
// halving and doubling; returns how many ranks' device results differ in any bit.
int differing_scatter_gather(fake_device& fake, chorus::cuda::router& router, int ranks, std::size_t block, bool ring) {
  std::atomic<int> differ{0};
  const chorus::cuda::route_front_doors routing(router);
  const auto scatter_algorithm = ring ? chorus::algorithm::ring : chorus::algorithm::recursive_halving;
  const auto gather_algorithm = ring ? chorus::algorithm::ring : chorus::algorithm::recursive_doubling;
  chorus::run_threads(
      ranks,
      [&](chorus::communicator& comm) {
        const std::size_t all = block * static_cast<std::size_t>(ranks);
        const std::vector<float> input = inputs<float>(comm.rank(), all);
        std::vector<float> reduced(block), gathered(all), in_place(all, 0.0f);
        chorus::reduce_scatter(comm, std::span<const float>(input), std::span(reduced), chorus::op::sum{},
                               scatter_algorithm);
        chorus::allgather(comm, std::span<const float>(reduced), std::span(gathered), gather_algorithm);
        std::copy(reduced.begin(), reduced.end(),
                  in_place.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(comm.rank())));
        chorus::allgather(comm, std::span(in_place), gather_algorithm);

        auto* d_input = static_cast<float*>(fake.allocate_device(all * sizeof(float)));
        auto* d_reduced = static_cast<float*>(fake.allocate_device(block * sizeof(float)));
        auto* d_gathered = static_cast<float*>(fake.allocate_device(all * sizeof(float)));
        auto* d_in_place = static_cast<float*>(fake.allocate_device(all * sizeof(float)));
        fake.write(d_input, std::span<const float>(input));
        std::vector<float> own_block(all, 0.0f);
        std::copy(reduced.begin(), reduced.end(),
                  own_block.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(comm.rank())));
        fake.write(d_in_place, std::span<const float>(own_block));
        chorus::reduce_scatter(comm, std::span<const float>(d_input, all), std::span(d_reduced, block),
                               chorus::op::sum{}, scatter_algorithm);
        chorus::allgather(comm, std::span<const float>(d_reduced, block), std::span(d_gathered, all), gather_algorithm);
        chorus::allgather(comm, std::span(d_in_place, all), gather_algorithm);
        const bool same = fake.read(d_reduced, block) == reduced && fake.read(d_gathered, all) == gathered &&
                          fake.read(d_in_place, all) == in_place;
        for (float* p : {d_input, d_reduced, d_gathered, d_in_place}) fake.free_device(p);
        if (!same) ++differ;
      },
      chorus_test::quick());
  return differ.load();
}

}  // namespace

TEST_CASE(
    "direct path: reduce_scatter and allgather, ring and recursive, on device buffers equal the host's, unstaged") {
  fake_gpu setup(path_setting::automatic);
  auto& [fake, gpu, kernels, router] = setup;
  for (const int ranks : {1, 2, 3, 5})
    for (const std::size_t block : {std::size_t{1}, std::size_t{7}, std::size_t{3001}}) {
      CAPTURE(ranks);
      CAPTURE(block);
      CHECK(differing_scatter_gather(fake, router, ranks, block, true) == 0);
      CHECK(differing_scatter_gather(fake, router, ranks, block, false) == 0);
    }
  CHECK(fake.pinned_allocations() == 0);  // nothing went through pinned memory
  CHECK(kernels.launches.load() > 0);
}

TEST_CASE("direct path: without device kernels, allgather still goes direct and reduce_scatter is staged") {
  fake_gpu setup(path_setting::automatic, without_kernels);
  auto& [fake, gpu, kernels, router] = setup;
  const chorus::cuda::route_front_doors routing(router);
  std::atomic<int> differ{0};
  std::size_t after_gather = 0;
  chorus::run_threads(
      3,
      [&](chorus::communicator& comm) {
        const std::size_t block = 1000, all = 3000;
        const std::vector<float> mine = inputs<float>(comm.rank(), block);
        std::vector<float> gathered(all);
        chorus::allgather(comm, std::span<const float>(mine), std::span(gathered), chorus::algorithm::ring);
        auto* d_mine = static_cast<float*>(fake.allocate_device(block * sizeof(float)));
        auto* d_all = static_cast<float*>(fake.allocate_device(all * sizeof(float)));
        fake.write(d_mine, std::span<const float>(mine));
        chorus::allgather(comm, std::span<const float>(d_mine, block), std::span(d_all, all), chorus::algorithm::ring);
        if (fake.read(d_all, all) != gathered) ++differ;
        comm.barrier();
        if (comm.rank() == 0) after_gather = fake.pinned_allocations();
        comm.barrier();
        chorus::reduce_scatter(comm, std::span<const float>(d_all, all), std::span(d_mine, block), chorus::op::sum{},
                               chorus::algorithm::ring);
        fake.free_device(d_mine);
        fake.free_device(d_all);
      },
      chorus_test::quick());
  CHECK(differ.load() == 0);
  CHECK(after_gather == 0);
  CHECK(fake.pinned_allocations() > 0);
}

TEST_CASE("direct path: broadcast by tree and chain on device buffers equals the host's, unstaged, without kernels") {
  fake_gpu setup(path_setting::automatic, without_kernels);
  auto& [fake, gpu, kernels, router] = setup;
  const chorus::cuda::route_front_doors routing(router);
  for (const int ranks : {1, 2, 3, 5})
    for (const std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{99991}})
      for (const auto algorithm : {chorus::algorithm::tree, chorus::algorithm::chain}) {
        CAPTURE(ranks);
        CAPTURE(count);
        std::atomic<int> differ{0};
        const int root = ranks - 1;
        chorus::run_threads(
            ranks,
            [&](chorus::communicator& comm) {
              std::vector<float> host =
                  comm.rank() == root ? inputs<float>(7, count) : std::vector<float>(count, -1.0f);
              auto* device = static_cast<float*>(fake.allocate_device(count * sizeof(float)));
              fake.write(device, std::span<const float>(host));
              chorus::broadcast(comm, std::span(device, count), root, algorithm);
              chorus::broadcast(comm, std::span(host), root, algorithm);
              if (fake.read(device, count) != host) ++differ;
              fake.free_device(device);
            },
            chorus_test::quick());
        CHECK(differ.load() == 0);
      }
  CHECK(fake.pinned_allocations() == 0);
}

TEST_CASE("direct path: gather, scatter and alltoall on device buffers equal the host's, unstaged, without kernels") {
  fake_gpu setup(path_setting::automatic, without_kernels);
  auto& [fake, gpu, kernels, router] = setup;
  const chorus::cuda::route_front_doors routing(router);
  for (const int ranks : {1, 2, 3, 5})
    for (const std::size_t block : {std::size_t{1}, std::size_t{7}, std::size_t{3001}}) {
      CAPTURE(ranks);
      CAPTURE(block);
      std::atomic<int> differ{0};
      const int root = ranks / 2;
      chorus::run_threads(
          ranks,
          [&](chorus::communicator& comm) {
            const std::size_t all = block * static_cast<std::size_t>(ranks);
            const std::vector<float> mine = inputs<float>(comm.rank(), block),
                                     many = inputs<float>(comm.rank() + 10, all);
            std::vector<float> gathered(all, -1.0f), scattered(block, -1.0f), exchanged(all, -1.0f);
            chorus::gather(comm, std::span<const float>(mine), std::span(gathered), root);
            chorus::scatter(comm, std::span<const float>(many), std::span(scattered), root);
            chorus::alltoall(comm, std::span<const float>(many), std::span(exchanged));

            auto* d_mine = static_cast<float*>(fake.allocate_device(block * sizeof(float)));
            auto* d_many = static_cast<float*>(fake.allocate_device(all * sizeof(float)));
            auto* d_gathered = static_cast<float*>(fake.allocate_device(all * sizeof(float)));
            auto* d_scattered = static_cast<float*>(fake.allocate_device(block * sizeof(float)));
            auto* d_exchanged = static_cast<float*>(fake.allocate_device(all * sizeof(float)));
            fake.write(d_mine, std::span<const float>(mine));
            fake.write(d_many, std::span<const float>(many));
            fake.write(d_gathered, std::span<const float>(std::vector<float>(all, -1.0f)));
            chorus::gather(comm, std::span<const float>(d_mine, block), std::span(d_gathered, all), root);
            chorus::scatter(comm, std::span<const float>(d_many, all), std::span(d_scattered, block), root);
            chorus::alltoall(comm, std::span<const float>(d_many, all), std::span(d_exchanged, all));
            const bool same = fake.read(d_gathered, all) == gathered && fake.read(d_scattered, block) == scattered &&
                              fake.read(d_exchanged, all) == exchanged;
            for (float* p : {d_mine, d_many, d_gathered, d_scattered, d_exchanged}) fake.free_device(p);
            if (!same) ++differ;
          },
          chorus_test::quick());
      CHECK(differ.load() == 0);
    }
  CHECK(fake.pinned_allocations() == 0);
}

namespace {

// reduce out of place and in place on the fake device through `router` and
// on the host; returns how many ranks' device buffers differ in any bit
// (the root's results, and every other rank's untouched data).
template <class T, class Op>
int differing_reduce(fake_device& fake, chorus::cuda::router& router, int ranks, std::size_t count, int root, Op op) {
  std::atomic<int> differ{0};
  const chorus::cuda::route_front_doors routing(router);
  chorus::run_threads(
      ranks,
      [&](chorus::communicator& comm) {
        const std::vector<T> input = inputs<T>(comm.rank(), count);
        std::vector<T> output(count, T(-1)), in_place = input;
        chorus::reduce(comm, std::span<const T>(input), std::span(output), root, op);
        chorus::reduce(comm, std::span(in_place), root, op);

        auto* d_input = static_cast<T*>(fake.allocate_device(count * sizeof(T)));
        auto* d_output = static_cast<T*>(fake.allocate_device(count * sizeof(T)));
        auto* d_in_place = static_cast<T*>(fake.allocate_device(count * sizeof(T)));
        fake.write(d_input, std::span<const T>(input));
        fake.write(d_output, std::span<const T>(std::vector<T>(count, T(-1))));
        fake.write(d_in_place, std::span<const T>(input));
        chorus::reduce(comm, std::span<const T>(d_input, count), std::span(d_output, count), root, op);
        chorus::reduce(comm, std::span(d_in_place, count), root, op);
        const bool same = fake.read(d_input, count) == input && fake.read(d_output, count) == output &&
                          fake.read(d_in_place, count) == in_place;
        for (T* p : {d_input, d_output, d_in_place}) fake.free_device(p);
        if (!same) ++differ;
      },
      chorus_test::quick());
  return differ.load();
}

}  // namespace

TEST_CASE("direct path: reduce on device buffers equals the host's, in and out of place, unstaged") {
  fake_gpu setup(path_setting::automatic);
  auto& [fake, gpu, kernels, router] = setup;
  for (const int ranks : {1, 2, 3, 5})
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{30011}}) {
      CAPTURE(ranks);
      CAPTURE(count);
      const int root = (ranks + 1) / 2 % ranks;
      CHECK(differing_reduce<float>(fake, router, ranks, count, root, chorus::op::sum{}) == 0);
      CHECK(differing_reduce<double>(fake, router, ranks, count, root, chorus::op::avg{}) == 0);
      CHECK(differing_reduce<std::int32_t>(fake, router, ranks, count, root, chorus::op::min{}) == 0);
    }
  CHECK(fake.pinned_allocations() == 0);  // nothing went through pinned memory
  CHECK(kernels.launches.load() > 0);
  // half reduces in float: staged, same bits.
  CHECK(differing_reduce<chorus::half>(fake, router, 3, 1000, 1, chorus::op::sum{}) == 0);
  CHECK(fake.pinned_allocations() > 0);
}

TEST_CASE("direct path: send and recv, blocking and not, move device buffers unstaged, without kernels") {
  fake_gpu setup(path_setting::automatic, without_kernels);
  auto& [fake, gpu, kernels, router] = setup;
  const chorus::cuda::route_front_doors routing(router);
  for (const int ranks : {2, 3, 5})
    for (const std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{100003}}) {
      CAPTURE(ranks);
      CAPTURE(count);
      std::atomic<int> differ{0};
      chorus::run_threads(
          ranks,
          [&](chorus::communicator& comm) {
            // Around a ring: even ranks send first, odd ones receive first.
            const int right = (comm.rank() + 1) % ranks, left = (comm.rank() + ranks - 1) % ranks;
            const std::vector<double> mine = inputs<double>(comm.rank(), count);
            auto* d_mine = static_cast<double*>(fake.allocate_device(count * sizeof(double)));
            auto* d_theirs = static_cast<double*>(fake.allocate_device(count * sizeof(double)));
            fake.write(d_mine, std::span<const double>(mine));
            if (comm.rank() % 2 == 0) {
              comm.send(std::span<const double>(d_mine, count), right, 3);
              comm.recv(std::span(d_theirs, count), left, 3);
            } else {
              comm.recv(std::span(d_theirs, count), left, 3);
              comm.send(std::span<const double>(d_mine, count), right, 3);
            }
            if (fake.read(d_theirs, count) != inputs<double>(left, count)) ++differ;
            // Non-blocking: the same ring the other way round, all at once.
            std::array<chorus::communicator::request, 2> both{
                comm.irecv(std::span(d_theirs, count), right, 4),
                comm.isend(std::span<const double>(d_mine, count), left, 4)};
            comm.wait_all(both);
            if (fake.read(d_theirs, count) != inputs<double>(right, count)) ++differ;
            for (double* p : {d_mine, d_theirs}) fake.free_device(p);
          },
          chorus_test::quick());
      CHECK(differ.load() == 0);
    }
  CHECK(fake.pinned_allocations() == 0);
}

namespace {

// One compressed allreduce to run: its options, and whether it averages.
struct compressed_call {
  chorus::compression_options options;
  bool average = false;
};

// Every rank allreduces its inputs compressed with `coder`, each call of
// `calls` twice (error feedback carries its residual over), on the fake
// device through `router` (the rank `host_rank`, if any, from host memory)
// and on the host; returns how many (rank, call) results differ in any bit.
// Coders with state are copied, one per rank and path.
// A rank on host memory among ranks on device memory is a mismatch to
// CHORUS_CHECK (on by default without NDEBUG): where a test mixes them on
// purpose, with the scheme forced alike, the check is off.
chorus::options mixing_memory(bool mixed) {
  chorus::options options = chorus_test::quick();
  if (mixed) options.check = false;
  return options;
}

template <class Coder>
int differing_compressed(fake_device& fake, chorus::cuda::router& router, int ranks, std::size_t count, Coder coder,
                         const std::vector<compressed_call>& calls, int host_rank = -1) {
  std::atomic<int> differ{0};
  const chorus::cuda::route_front_doors routing(router);
  chorus::run_threads(
      ranks,
      [&](chorus::communicator& comm) {
        auto* device = static_cast<float*>(fake.allocate_device(count * sizeof(float)));
        for (const compressed_call& call : calls) {
          Coder on_device = coder, on_host = coder;
          std::vector<float> host = inputs<float>(comm.rank(), count), mixed = host;
          fake.write(device, std::span<const float>(host));
          const auto allreduce = [&](std::span<float> data, Coder& c) {
            if (call.average)
              chorus::allreduce(comm, data, chorus::op::avg{}, c, call.options);
            else
              chorus::allreduce(comm, data, chorus::op::sum{}, c, call.options);
          };
          for (int step = 0; step < 2; ++step) {
            allreduce(comm.rank() == host_rank ? std::span(mixed) : std::span(device, count), on_device);
            allreduce(std::span(host), on_host);
          }
          const std::vector<float> result = comm.rank() == host_rank ? mixed : fake.read(device, count);
          if (count > 0 && std::memcmp(result.data(), host.data(), count * sizeof(float)) != 0) ++differ;
        }
        fake.free_device(device);
      },
      mixing_memory(host_rank >= 0));
  return differ.load();
}

template <class Codec>
void check_compressed_direct(fake_device& fake, chorus::cuda::router& router, const Codec& coder) {
  CAPTURE(Codec::name);
  compressed_call ring, once, chunked, odd_prescale;
  ring.options.scheme = chorus::compression_scheme::ring;
  once.options.scheme = chunked.options.scheme = odd_prescale.options.scheme = chorus::compression_scheme::encode_once;
  once.average = odd_prescale.average = true;
  chunked.options.chunk_bytes = 512;     // several pipelined chunks
  odd_prescale.options.prescale = 3.0f;  // undone by division, not by multiplying
  compressed_call ring_average = ring;
  ring_average.average = true;
  for (const int ranks : {1, 2, 3, 5})
    for (const std::size_t count :
         {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1000}, std::size_t{20011}}) {
      CAPTURE(ranks);
      CAPTURE(count);
      CHECK(differing_compressed(fake, router, ranks, count, coder,
                                 {ring, ring_average, once, chunked, odd_prescale}) == 0);
    }
}

}  // namespace

TEST_CASE("direct path: compressed allreduce, both schemes, every device codec, equals the host's, unstaged") {
  fake_gpu setup(path_setting::automatic);
  auto& [fake, gpu, kernels, router] = setup;
  check_compressed_direct(fake, router, chorus::codec::fp16{});
  check_compressed_direct(fake, router, chorus::codec::bf16{chorus::codec::overflow::infinity});
  check_compressed_direct(fake, router, chorus::codec::int8{64});
  check_compressed_direct(fake, router, chorus::codec::fp4_e2m1{40});
  check_compressed_direct(fake, router, chorus::codec::onebit{72});
  CHECK(fake.pinned_allocations() == 0);  // nothing went through pinned memory
  CHECK(kernels.codec_launches.load() > 0);
}

TEST_CASE("direct path: a compressed ring with ranks on the device and on the host") {
  fake_gpu setup(path_setting::direct);
  auto& [fake, gpu, kernels, router] = setup;
  chorus::compression_options ring, once;
  ring.scheme = chorus::compression_scheme::ring;
  once.scheme = chorus::compression_scheme::encode_once;
  CHECK(differing_compressed(fake, router, 3, 30011, chorus::codec::fp16{}, {{ring, false}}, 1) == 0);
  CHECK(differing_compressed(fake, router, 3, 30011, chorus::codec::int8{}, {{once, true}}, 2) == 0);
  CHECK(fake.pinned_allocations() == 0);
}

TEST_CASE("direct path: error feedback keeps a device tensor's residual on the device, with the host's bits") {
  fake_gpu setup(path_setting::direct);
  auto& [fake, gpu, kernels, router] = setup;
  compressed_call ring, once, chunked;
  ring.options.scheme = chorus::compression_scheme::ring;
  once.options.scheme = chunked.options.scheme = chorus::compression_scheme::encode_once;
  once.average = true;
  chunked.options.chunk_bytes = 512;
  for (const int ranks : {1, 2, 3, 5})
    for (const std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{5003}}) {
      CAPTURE(ranks);
      CAPTURE(count);
      const std::vector<compressed_call> calls{ring, once, chunked};
      CHECK(differing_compressed(fake, router, ranks, count, chorus::codec::error_feedback{chorus::codec::onebit{}},
                                 calls) == 0);
      CHECK(differing_compressed(fake, router, ranks, count, chorus::codec::error_feedback{chorus::codec::fp16{}},
                                 calls) == 0);
      CHECK(differing_compressed(fake, router, ranks, count, chorus::codec::error_feedback{chorus::codec::int8{64}},
                                 calls) == 0);
    }
  CHECK(fake.pinned_allocations() == 0);
  CHECK(kernels.feedback_launches.load() > 0);

  // One object serves one kind of memory: a clear error, not a mixed-up residual.
  const chorus::cuda::route_front_doors routing(router);
  chorus::run_threads(
      1,
      [&](chorus::communicator& comm) {
        chorus::codec::error_feedback feedback{chorus::codec::int8{}};
        std::vector<float> host(100, 1.5f);
        auto* device = static_cast<float*>(fake.allocate_device(host.size() * sizeof(float)));
        fake.write(device, std::span<const float>(host));
        chorus::allreduce(comm, std::span(device, host.size()), chorus::op::sum{}, feedback);
        CHECK(feedback.residual(0).empty());  // the residual is on the device
        chorus_test::expect_error([&] { chorus::allreduce(comm, std::span(host), chorus::op::sum{}, feedback); },
                                  chorus::errc::invalid_argument, "residual in device memory");
        chorus_test::expect_error([&] { [[maybe_unused]] const auto copy = feedback; }, chorus::errc::invalid_argument,
                                  "cannot be copied");
        fake.free_device(device);
      },
      chorus_test::quick());
}

TEST_CASE("direct path: a codec without device kernels is staged, with the host's bits") {
  fake_gpu setup(path_setting::direct);
  auto& [fake, gpu, kernels, router] = setup;
  compressed_call once;
  once.options.scheme = chorus::compression_scheme::encode_once;
  CHECK(differing_compressed(fake, router, 2, 999, chorus::codec::identity{}, {once}) == 0);
  CHECK(fake.copies() > 0);
}

namespace {

// Compressed allgather and broadcast (root: the last rank) on the fake
// device through `router` and on the host; ranks whose results differ.
template <class Codec>
int differing_compressed_moves(fake_device& fake, chorus::cuda::router& router, int ranks, std::size_t count,
                               const Codec& coder) {
  std::atomic<int> differ{0};
  const chorus::cuda::route_front_doors routing(router);
  chorus::run_threads(
      ranks,
      [&](chorus::communicator& comm) {
        const std::size_t all = count * static_cast<std::size_t>(ranks);
        const std::vector<float> mine = inputs<float>(comm.rank(), count);
        std::vector<float> gathered(all), broadcast = mine;
        chorus::allgather(comm, std::span<const float>(mine), std::span(gathered), coder);
        chorus::broadcast(comm, std::span(broadcast), ranks - 1, coder);

        auto* d_mine = static_cast<float*>(fake.allocate_device(count * sizeof(float)));
        auto* d_gathered = static_cast<float*>(fake.allocate_device(all * sizeof(float)));
        auto* d_broadcast = static_cast<float*>(fake.allocate_device(count * sizeof(float)));
        fake.write(d_mine, std::span<const float>(mine));
        fake.write(d_broadcast, std::span<const float>(mine));
        chorus::allgather(comm, std::span<const float>(d_mine, count), std::span(d_gathered, all), coder);
        chorus::broadcast(comm, std::span(d_broadcast, count), ranks - 1, coder);
        const auto same = [](const std::vector<float>& a, const std::vector<float>& b) {
          return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
        };
        if (!same(fake.read(d_gathered, all), gathered) || !same(fake.read(d_broadcast, count), broadcast)) ++differ;
        for (float* p : {d_mine, d_gathered, d_broadcast}) fake.free_device(p);
      },
      chorus_test::quick());
  return differ.load();
}

}  // namespace

TEST_CASE("direct path: compressed allgather and broadcast on device buffers equal the host's, unstaged") {
  fake_gpu setup(path_setting::automatic);
  auto& [fake, gpu, kernels, router] = setup;
  for (const int ranks : {1, 2, 3, 5})
    for (const std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{3001}}) {
      CAPTURE(ranks);
      CAPTURE(count);
      CHECK(differing_compressed_moves(fake, router, ranks, count, chorus::codec::bf16{}) == 0);
      CHECK(differing_compressed_moves(fake, router, ranks, count, chorus::codec::int8{}) == 0);
      CHECK(differing_compressed_moves(fake, router, ranks, count, chorus::codec::onebit{}) == 0);
    }
  CHECK(fake.pinned_allocations() == 0);
  CHECK(kernels.codec_launches.load() > 0);
}

TEST_CASE("D-PSGD with a device model on a chorus communicator whose UCX moves it: mixes on the device, host bits") {
  constexpr std::size_t sizes[] = {5, 0, 1003};  // three tensors, one empty
  constexpr std::size_t total = 1008;
  const auto start_value = [](int rank, std::size_t k) {
    return static_cast<float>((rank * 31 + static_cast<int>(k) * 7) % 23) * 0.37f - 3.0f;
  };
  const auto gradient = [](int rank, int step, std::size_t k) {
    return static_cast<float>((rank * 5 + step * 11 + static_cast<int>(k) * 3) % 19) * 0.013f - 0.1f;
  };
  const chorus::codec::any_codec wires[] = {chorus::codec::any_codec(), chorus::codec::by_name("fp16"),
                                            chorus::codec::any_codec(chorus::codec::int8{64})};
  // Both of UCX's answers yes: the round mixes on the device (no pinned
  // memory); the buffer registered as host memory: the round is staged.
  for (const bool registered_as_device : {true, false})
    for (const chorus::codec::any_codec& wire : wires)
      for (const int n : {2, 3, 5}) {
        CAPTURE(registered_as_device);
        CAPTURE(wire.name());
        CAPTURE(n);
        fake_gpu setup(path_setting::automatic);
        auto& [fake, gpu, kernels, router] = setup;
        fake.set_registered_as_device(registered_as_device);
        const chorus::cuda::route_front_doors routing(router);
        std::atomic<std::size_t> wrong{0};
        chorus::run_threads(
            n,
            [&](chorus::communicator& comm) {
              const chorus::averaging::dpsgd_options options{chorus::averaging::topology::ring(n), wire};
              std::vector<float> host(total);
              for (std::size_t k = 0; k < total; ++k) host[k] = start_value(comm.rank(), k);
              auto* device = static_cast<float*>(fake.allocate_device(total * sizeof(float)));
              fake.write(device, std::span<const float>(host));
              const auto tensors = [&](float* base) {
                std::vector<std::span<float>> parts;
                std::size_t offset = 0;
                for (std::size_t size : sizes) {
                  parts.emplace_back(base + offset, size);
                  offset += size;
                }
                return chorus::averaging::parameters(parts);
              };
              {
                chorus::averaging::dpsgd on_host(comm, tensors(host.data()), options);
                chorus::averaging::dpsgd on_device(comm, tensors(device), options);
                for (int step = 0; step < 4; ++step) {
                  std::vector<float> grads(total);
                  for (std::size_t k = 0; k < total; ++k) grads[k] = gradient(comm.rank(), step, k);
                  on_host.step([] {},
                               [&] {
                                 for (std::size_t k = 0; k < total; ++k) host[k] -= grads[k];
                               });
                  on_device.step([] {},
                                 [&] {
                                   std::vector<float> now = fake.read(device, total);
                                   for (std::size_t k = 0; k < total; ++k) now[k] -= grads[k];
                                   fake.write(device, std::span<const float>(now));
                                 });
                }
                const std::vector<float> mixed = fake.read(device, total);
                for (std::size_t k = 0; k < total; ++k) wrong += std::memcmp(&mixed[k], &host[k], sizeof(float)) != 0;
              }
              fake.free_device(device);
            },
            chorus_test::quick());
        CHECK(wrong.load() == 0);
        if (registered_as_device) {
          CHECK(kernels.launches.load() > 0);     // the mixing ran on the device
          CHECK(fake.pinned_allocations() == 0);  // and nothing was staged
        } else {
          CHECK(kernels.launches.load() == 0);  // the host mixed
        }
      }
}

TEST_CASE("window slots in device memory: put, accumulate, update, publish and get give the host slots' bits") {
  const chorus::codec::any_codec wires[] = {chorus::codec::any_codec(), chorus::codec::by_name("fp16"),
                                            chorus::codec::any_codec(chorus::codec::int8{64}),
                                            chorus::codec::by_name("fp4_e2m1")};
  struct shape {
    int ranks;
    std::size_t elements;
  };
  // UCX takes the fake's memory for device memory, or calls it host memory
  // (then the device tensors are staged through host slots, same bits).
  for (const bool registered_as_device : {true, false})
    for (const chorus::codec::any_codec& wire : wires)
      for (const shape at : {shape{2, 1003}, shape{3, 1003}, shape{5, 257}, shape{3, 1}, shape{3, 0}}) {
        if (!registered_as_device && at.ranks != 3) continue;
        CAPTURE(registered_as_device);
        CAPTURE(wire.name());
        CAPTURE(at.ranks);
        CAPTURE(at.elements);
        fake_gpu setup(path_setting::automatic);
        auto& [fake, gpu, kernels, router] = setup;
        fake.set_registered_as_device(registered_as_device);
        const chorus::cuda::route_front_doors routing(router);
        const std::size_t n = at.elements;
        std::atomic<std::size_t> wrong{0}, on_device{0};
        chorus::run_threads(
            at.ranks,
            [&](chorus::communicator& comm) {
              auto* device = static_cast<float*>(fake.allocate_device(std::max<std::size_t>(n, 1) * sizeof(float)));
              const auto write = [&](const std::vector<float>& values) {
                fake.write(device, std::span<const float>(values));
                return std::span<float>(device, n);
              };
              // Device slots hand device spans; host slots host ones.
              const auto read = [&](std::span<const float> values) {
                if (fake.kind_of(values.data()) == chorus::memory_kind::cuda_device)
                  return fake.read(values.data(), values.size());
                return std::vector<float>(values.begin(), values.end());
              };
              on_device += chorus_test::window_rounds(comm, n, wire, write, read, [&](const char*) { ++wrong; });
              fake.free_device(device);
            },
            chorus_test::quick());
        CHECK(wrong.load() == 0);
        const bool expected = registered_as_device && n > 0;
        CHECK(on_device.load() == (expected ? static_cast<std::size_t>(at.ranks) : 0));
        if (expected) {
          CHECK(fake.pinned_allocations() == 0);  // nothing staged
          CHECK(kernels.launches.load() > 0);     // the combines ran on the device
        }
      }
}
