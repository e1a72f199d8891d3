// chorus-perf --device on the fake device: every collective's sweep with its
// buffers in memory the host cannot touch (any host access crashes the
// test), routed through the staged path, and checked for #wrong by
// downloading the results. A corrupted download must show up as wrong.
#include "fake_device.hpp"
#include "fake_nccl.hpp"
#include "perf/collective.hpp"
#include "support.hpp"

#include <chorus/cuda/router.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>

namespace {

using chorus_test::fake_device;

class fake_memory final : public perf::device_memory {
 public:
  explicit fake_memory(fake_device& f) : fake_(f) {}
  std::string name() const override { return "fake device memory"; }
  void* allocate(std::size_t bytes) override {
    ++allocations;
    return fake_.allocate_device(bytes);
  }
  void release(void* data) noexcept override { fake_.free_device(data); }
  void upload(void* device, const void* host, std::size_t bytes) override {
    fake_.write(static_cast<std::byte*>(device), std::span(static_cast<const std::byte*>(host), bytes));
  }
  void download(void* host, const void* device, std::size_t bytes) override {
    std::vector<std::byte> bytes_read = fake_.read(static_cast<const std::byte*>(device), bytes);
    if (corrupt && !bytes_read.empty()) bytes_read[bytes / 2] ^= std::byte{0x40};
    std::memcpy(host, bytes_read.data(), bytes);
  }
  void copy(void* to, const void* from, std::size_t bytes) override {
    fake_.copy_async(to, from, bytes, nullptr);
    fake_.synchronize(nullptr);
  }

  std::atomic<int> allocations{0};
  std::atomic<bool> corrupt{false};

 private:
  fake_device& fake_;
};

// Runs `entry` on `ranks` threads over fake device buffers; returns the
// largest exit status (0: no wrong element anywhere).
// With `nccl`, the sweep runs on an NCCL communicator over it (--backend nccl).
int sweep_on_device(const perf::collective& entry, int ranks, fake_memory& memory, const std::string& codec = {},
                    std::shared_ptr<chorus::nccl::adapter> nccl = {}) {
  std::atomic<int> worst{0};
  chorus::run_threads(
      ranks,
      [&](chorus::communicator& comm) {
        std::optional<chorus::nccl::communicator> gpus;
        if (nccl) gpus.emplace(comm, nccl);
        perf::options config;
        config.collective = std::string(entry.name);
        config.codec = codec;
        config.min_bytes = 4;
        config.max_bytes = 40000;  // not a multiple of the chunks or the rank counts
        config.factor = 100;
        config.iterations = 1;
        config.auto_bytes = 0;  // exactly one call per size
        config.warmup = 0;
        config.memory = &memory;
        if (gpus) {
          config.backend = "nccl";
          config.nccl = &*gpus;
        }
        const int status = entry.run(comm, config);
        int seen = worst.load();
        while (status > seen && !worst.compare_exchange_weak(seen, status)) {}
      },
      chorus_test::quick());
  return worst.load();
}

const perf::collective* const every_collective[] = {
    &perf::allreduce_entry,      &perf::broadcast_entry, &perf::reduce_entry, &perf::allgather_entry,
    &perf::reduce_scatter_entry, &perf::alltoall_entry,  &perf::gather_entry, &perf::scatter_entry};

// A fake device routed through the front doors, with chorus-perf's view of its memory.
struct routed_fake {
  fake_device fake;
  chorus::cuda::device gpu{fake};
  chorus::cuda::router router{gpu, {4096, 3}};
  chorus::cuda::route_front_doors routing{router};
  fake_memory memory{fake};
};

}  // namespace

TEST_CASE("chorus-perf --device: every collective over device buffers, no wrong element") {
  routed_fake device;
  fake_memory& memory = device.memory;
  for (const perf::collective* entry : every_collective)
    for (const int ranks : {1, 3}) {
      CAPTURE(entry->name);
      CAPTURE(ranks);
      CHECK(sweep_on_device(*entry, ranks, memory) == 0);
    }
  CHECK(sweep_on_device(perf::compressed_allreduce_entry, 3, memory, "int8") == 0);
  CHECK(memory.allocations.load() > 0);
}

TEST_CASE("chorus-perf --device: a wrong result on the device is counted") {
  routed_fake device;
  device.memory.corrupt = true;
  CHECK(sweep_on_device(perf::allreduce_entry, 2, device.memory) != 0);
}

TEST_CASE("chorus-perf --backend nccl: every collective on an NCCL communicator over device buffers") {
  // NCCL here is the host adapter over the fake device's memory
  // (fake_nccl.hpp); the host never touches a device pointer.
  routed_fake device;
  const auto nccl = chorus_test::nccl_on(device.fake);
  for (const perf::collective* entry : every_collective)
    for (const int ranks : {1, 3}) {
      CAPTURE(entry->name);
      CAPTURE(ranks);
      CHECK(sweep_on_device(*entry, ranks, device.memory, {}, nccl) == 0);
    }
  device.memory.corrupt = true;
  CHECK(sweep_on_device(perf::allreduce_entry, 2, device.memory, {}, nccl) != 0);
}
