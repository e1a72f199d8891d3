// Device buffers through the staged path, on the fake device (memory the
// host cannot touch; streams on worker threads), ranks as threads over the
// real UCX transport: every algorithm gives the same bits as the host
// allreduce of the same inputs; the copies are ordered after the caller's
// stream and the result is visible on it; pinned buffers are reused.
#include <chorus/cuda/device_allreduce.hpp>
#include <chorus/cuda/part_staging.hpp>

#include "fake_device.hpp"
#include "support.hpp"

#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <thread>
#include <vector>

using chorus::communicator;
using chorus_test::fake_device;
using chorus_test::quick;
using namespace std::chrono_literals;

namespace {

// Rank r's input: values whose float sums depend on the order of addition,
// so a staged result that reduced in another order would show.
template <class T>
std::vector<T> input_of(int rank, std::size_t count) {
  std::vector<T> x(count);
  for (std::size_t i = 0; i < count; ++i) {
    const double v = std::sin(static_cast<double>(i * 7 + 1) * 0.37 + rank) * (1.0 + rank) * 1000.0 /
                     (1.0 + static_cast<double>(i % 13));
    if constexpr (std::is_integral_v<T>)
      x[i] = static_cast<T>(static_cast<long>(v) % 1000);
    else
      x[i] = static_cast<T>(static_cast<float>(v));
  }
  return x;
}

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

struct staged_outcome {
  int differing_ranks = 0;  // staged result != host result of the same inputs
  chorus::algorithm staged_algorithm = chorus::algorithm::automatic, host_algorithm = chorus::algorithm::automatic;
};

// Each rank allreduces the same inputs twice: from host memory, and from
// fake device memory that a "kernel" on its stream writes only after a
// delay (so staging that did not wait for the caller's stream would read
// zeros). The result is read by a second "kernel" enqueued after the call.
template <class T, class Op>
staged_outcome compare_with_host(int ranks, std::size_t count, Op op, chorus::cuda::device_call call) {
  fake_device fake;
  chorus::cuda::device gpu(fake);
  staged_outcome outcome;
  std::mutex mutex;
  chorus::run_threads(
      ranks,
      [&](communicator& comm) {
        const std::vector<T> input = input_of<T>(comm.rank(), count);
        std::vector<T> host = input;
        const chorus::algorithm host_ran = chorus::allreduce(comm, std::span(host), op, call.forced);

        T* on_device = static_cast<T*>(fake.allocate_device(count * sizeof(T)));
        chorus::cuda::device_call mine = call;
        mine.stream = fake.create_stream();
        fake.launch(mine.stream, [&, on_device] {
          std::this_thread::sleep_for(20ms);
          fake.write(on_device, std::span<const T>(input));
        });
        const chorus::algorithm staged_ran = chorus::cuda::allreduce(comm, gpu, std::span(on_device, count), op, mine);
        std::vector<T> seen(count);
        fake.launch(mine.stream, [&, on_device] { seen = fake.read(on_device, count); });
        fake.synchronize(mine.stream);
        fake.destroy_stream(mine.stream);
        fake.free_device(on_device);

        std::lock_guard lock(mutex);
        outcome.differing_ranks += !same_bits(seen, host);
        outcome.staged_algorithm = staged_ran;
        outcome.host_algorithm = host_ran;
      },
      quick());
  return outcome;
}

}  // namespace

TEST_CASE("fake device: a host access to device memory crashes") {
  fake_device fake;
  auto* p = static_cast<float*>(fake.allocate_device(64));
  CHECK(fake.kind_of(p) == chorus::memory_kind::cuda_device);
  CHECK(fake.kind_of(p + 15) == chorus::memory_kind::cuda_device);
  float host = 0;
  CHECK(fake.kind_of(&host) == chorus::memory_kind::host);
  const pid_t child = fork();
  if (child == 0) {
    std::signal(SIGSEGV, SIG_DFL);  // not UCX's handler, which prints a backtrace
    volatile float touched = p[3];  // must fault
    (void)touched;
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGSEGV);
  fake.free_device(p);
}

TEST_CASE("staged allreduce: the same bits as the host path, every algorithm, odd sizes") {
  using chorus::algorithm;
  for (const int ranks : {1, 3, 5})
    for (const std::size_t count : chorus_test::odd_counts)
      for (const algorithm forced : {algorithm::automatic, algorithm::ring, algorithm::recursive_doubling,
                                     algorithm::rabenseifner, algorithm::tree}) {
        CAPTURE(ranks);
        CAPTURE(count);
        CAPTURE(chorus::to_string(forced));
        chorus::cuda::device_call call;
        call.forced = forced;
        const auto outcome = compare_with_host<float>(ranks, count, chorus::op::sum{}, call);
        CHECK(outcome.differing_ranks == 0);
        CHECK(outcome.staged_algorithm == outcome.host_algorithm);
      }
}

TEST_CASE("staged allreduce: element types and operators") {
  chorus::cuda::device_call call;
  call.staging = {4096, 3};  // many small chunks over three streams
  const std::size_t count = 50001;
  CHECK(compare_with_host<double>(4, count, chorus::op::sum{}, call).differing_ranks == 0);
  CHECK(compare_with_host<chorus::half>(3, count, chorus::op::avg{}, call).differing_ranks == 0);
  CHECK(compare_with_host<chorus::bfloat16>(3, count, chorus::op::max{}, call).differing_ranks == 0);
  CHECK(compare_with_host<std::int32_t>(5, count, chorus::op::prod{}, call).differing_ranks == 0);
  CHECK(compare_with_host<std::int64_t>(2, count, chorus::op::min{}, call).differing_ranks == 0);
  call.staging = {1000, 1};  // a chunk size that does not divide the buffer, one stream
  CHECK(compare_with_host<float>(3, count, chorus::op::avg{}, call).differing_ranks == 0);
}

TEST_CASE("staged allreduce: pinned buffers are reused from call to call") {
  fake_device fake;
  chorus::cuda::device gpu(fake);
  const std::size_t count = 100000;
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        float* data = static_cast<float*>(fake.allocate_device(count * sizeof(float)));
        for (int call = 0; call < 5; ++call) {
          const std::vector<float> input = input_of<float>(comm.rank() + call, count);
          fake.write(data, std::span(input));
          chorus::cuda::allreduce(comm, gpu, std::span(data, count));
        }
        fake.free_device(data);
      },
      quick());
  // One staging set per rank at most (three ranks may overlap), however many calls.
  CHECK(fake.pinned_allocations() <= 3);
}

TEST_CASE("staged allreduce: pinned and host buffers are reduced where they are") {
  fake_device fake;
  chorus::cuda::device gpu(fake);
  const std::size_t count = 3001;
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        const std::vector<float> input = input_of<float>(comm.rank(), count);
        std::vector<float> expected = input;
        chorus::allreduce(comm, std::span(expected));

        auto* pinned = static_cast<float*>(fake.allocate_pinned(count * sizeof(float)));
        chorus::cuda::device_call call;
        call.stream = fake.create_stream();
        fake.launch(call.stream, [&] {  // a kernel still writing the pinned buffer
          std::this_thread::sleep_for(20ms);
          std::memcpy(pinned, input.data(), count * sizeof(float));
        });
        const std::size_t copied = fake.copied_bytes();
        chorus::cuda::allreduce(comm, gpu, std::span(pinned, count), chorus::op::sum{}, call);
        CHECK(same_bits(std::vector<float>(pinned, pinned + count), expected));
        CHECK(fake.copied_bytes() == copied);  // no staging copies for pinned memory (this rank's)
        fake.destroy_stream(call.stream);
        fake.free_pinned(pinned);

        std::vector<float> host = input;
        chorus::cuda::allreduce(comm, gpu, std::span(host));
        CHECK(same_bits(host, expected));
      },
      quick());
}

TEST_CASE("staged allreduce: bad staging options are invalid_argument") {
  fake_device fake;
  chorus::cuda::device gpu(fake);
  chorus::run_threads(
      1,
      [&](communicator& comm) {
        float* data = static_cast<float*>(fake.allocate_device(64));
        chorus::cuda::device_call call;
        call.staging.depth = 0;
        CHECK_THROWS_AS(chorus::cuda::allreduce(comm, gpu, std::span(data, 16), chorus::op::sum{}, call),
                        chorus::error);
        call.staging = {0, 2};
        try {
          chorus::cuda::allreduce(comm, gpu, std::span(data, 16), chorus::op::sum{}, call);
          FAIL("no error for a zero chunk size");
        } catch (const chorus::error& e) {
          CHECK(e.category() == chorus::errc::invalid_argument);
        }
        fake.free_device(data);
      },
      quick());
}

// Part by part: need() waits only for the chunks of its part (a later
// chunk's copy is held back by a gate on its stream), and done() sends a
// part back to the device at once, before finish().
TEST_CASE("part staging: need waits for its own chunks only; done copies a part out at once") {
  fake_device fake;
  const std::size_t chunk = 4096, bytes = 4 * chunk + 100;
  std::vector<std::byte> values(bytes);
  for (std::size_t i = 0; i < bytes; ++i) values[i] = static_cast<std::byte>(i * 7 + 3);
  auto* on_device = static_cast<std::byte*>(fake.allocate_device(bytes));
  fake.write(on_device, std::span<const std::byte>(values));
  chorus::cuda::staging_set set;
  set.pinned = {static_cast<std::byte*>(fake.allocate_pinned(bytes)), bytes};
  std::fill(set.pinned.begin(), set.pinned.end(), std::byte{0});
  for (int s = 0; s < 2; ++s) {
    set.streams.push_back(fake.create_stream());
    set.events.push_back(fake.create_event());
  }
  std::atomic<bool> open{false};
  fake.launch(set.streams[1], [&] {  // chunks 1 and 3 go on stream 1: held until the gate opens
    while (!open) std::this_thread::yield();
  });
  const auto wait = [](chorus::function_ref<bool()> done, std::string_view) {
    while (!done()) std::this_thread::yield();
  };
  {
    chorus::cuda::device gpu(fake);
    chorus::cuda::stager copies(gpu, {chunk, 2}, nullptr);
    chorus::cuda::part_staging parts(copies, set, on_device, bytes, wait);
    parts.start();
    parts.need(100, chunk - 200);  // inside chunk 0
    CHECK(std::memcmp(parts.host(), values.data(), chunk) == 0);
    CHECK(std::all_of(parts.host() + chunk, parts.host() + 2 * chunk, [](std::byte b) { return b == std::byte{0}; }));
    parts.need(2 * chunk, chunk);  // chunk 2: stream 0, not held
    CHECK(std::memcmp(parts.host() + 2 * chunk, values.data() + 2 * chunk, chunk) == 0);

    parts.host()[5] = std::byte{0xab};
    parts.done(0, chunk);  // chunk 0 is final: back to the device before finish()
    fake.synchronize(set.streams[0]);
    CHECK(fake.read(on_device, 6)[5] == std::byte{0xab});

    open = true;
    parts.need(0, bytes);
    CHECK(std::memcmp(parts.host() + chunk, values.data() + chunk, bytes - chunk) == 0);
    parts.host()[bytes - 1] = std::byte{0xcd};
    parts.finish();  // the rest was never reported final: copied out whole
  }
  const std::vector<std::byte> ended = fake.read(on_device, bytes);
  CHECK(ended[5] == std::byte{0xab});
  CHECK(ended[bytes - 1] == std::byte{0xcd});
  CHECK(std::memcmp(ended.data() + 6, values.data() + 6, bytes - 7) == 0);
  for (int s = 0; s < 2; ++s) {
    fake.destroy_stream(set.streams[static_cast<std::size_t>(s)]);
    fake.destroy_event(set.events[static_cast<std::size_t>(s)]);
  }
  fake.free_pinned(set.pinned.data());
  fake.free_device(on_device);
}

// The ring is staged part by part (a copy out per finished segment, while
// the ring runs); recursive doubling is staged whole (one copy each way).
TEST_CASE("staged allreduce: the ring's copies go part by part, other algorithms' whole") {
  using chorus::algorithm;
  const std::size_t count = (1u << 18) + 3;  // 1 MiB: several 256 KiB ring segments per rank
  for (const algorithm forced : {algorithm::ring, algorithm::recursive_doubling}) {
    CAPTURE(chorus::to_string(forced));
    fake_device fake;
    chorus::cuda::device gpu(fake);
    std::atomic<int> differing{0};
    const int ranks = 3;
    chorus::run_threads(
        ranks,
        [&](communicator& comm) {
          const std::vector<float> input = input_of<float>(comm.rank(), count);
          std::vector<float> host = input;
          chorus::allreduce(comm, std::span(host), chorus::op::sum{}, forced);
          auto* on_device = static_cast<float*>(fake.allocate_device(count * sizeof(float)));
          fake.write(on_device, std::span<const float>(input));
          chorus::cuda::device_call call;
          call.forced = forced;
          chorus::cuda::allreduce(comm, gpu, std::span(on_device, count), chorus::op::sum{}, call);
          differing += !same_bits(fake.read(on_device, count), host);
          fake.free_device(on_device);
        },
        quick());
    CHECK(differing == 0);
    // One 4 MiB chunk in per rank; out: whole, or one copy per final segment.
    if (forced == algorithm::ring)
      CHECK(fake.copies() > static_cast<std::size_t>(2 * ranks));
    else
      CHECK(fake.copies() == static_cast<std::size_t>(2 * ranks));
  }
}
