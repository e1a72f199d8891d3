// Device buffers through every front door (cuda/router.hpp installed for
// the process): each collective, compressed collective, fused and
// non-blocking allreduce, and blocking send/recv, called on fake-device
// buffers (the host faults on any touch of them), gives the same bits as
// the same call on host copies, at 1, 3 and 5 ranks (threads over UCX) and
// odd sizes including 0 and 1, all on the staged path (the fake transport
// reaches host memory only). Non-blocking point-to-point refuses device
// memory that the transport cannot move.
#include <chorus/chorus.hpp>
#include <chorus/cuda/router.hpp>
#include <chorus/window.hpp>

#include "expect_error.hpp"
#include "fake_device.hpp"
#include "support.hpp"

#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>

using chorus::communicator;
using chorus_test::fake_device;
using chorus_test::quick;
using namespace std::chrono_literals;

namespace {

const std::size_t counts[] = {0, 1, 7, 4099};
const int rank_counts[] = {1, 3, 5};

// Values whose float sums depend on the order of addition.
std::vector<float> input_of(int rank, std::size_t count, int salt = 0) {
  std::vector<float> x(count);
  for (std::size_t i = 0; i < count; ++i)
    x[i] = static_cast<float>(std::sin(static_cast<double>(i * 7 + 1 + salt) * 0.37 + rank) * (1.0 + rank) * 1000.0 /
                              (1.0 + static_cast<double>(i % 13)));
  return x;
}

// A fake-device copy of a host vector.
struct on_device {
  fake_device& fake;
  float* data;
  std::size_t count;
  on_device(fake_device& f, const std::vector<float>& values)
      : fake(f), data(static_cast<float*>(f.allocate_device(values.size() * sizeof(float)))), count(values.size()) {
    fake.write(data, std::span<const float>(values));
  }
  on_device(const on_device&) = delete;
  ~on_device() { fake.free_device(data); }
  std::span<float> span() const { return {data, count}; }
  std::span<const float> in() const { return {data, count}; }
  std::vector<float> read() const { return fake.read(data, count); }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Runs `body(comm, fake, differ)` on every rank count with the router
// installed; body counts in `differ` each rank whose device result differs
// from its host result. Returns the total over all rank counts.
template <class Body>
int differing_ranks(Body&& body) {
  fake_device fake;
  fake.set_network_reaches(false);  // the staged path for every call (test_cuda_direct covers the direct one)
  chorus::cuda::device gpu(fake);
  chorus::cuda::router router(gpu, {4096, 3});  // small chunks: several per buffer
  const chorus::cuda::route_front_doors routing(router);
  std::atomic<int> differ{0};
  for (const int ranks : rank_counts) {
    CAPTURE(ranks);
    chorus::run_threads(ranks, [&](communicator& comm) { body(comm, fake, differ); }, quick());
  }
  return differ.load();
}

}  // namespace

TEST_CASE("front doors: allreduce, in place and into an output, from device memory") {
  CHECK(differing_ranks([](communicator& comm, fake_device& fake, std::atomic<int>& differ) {
          for (const std::size_t count : counts) {
            const std::vector<float> input = input_of(comm.rank(), count);
            std::vector<float> host = input;
            chorus::allreduce(comm, std::span(host), chorus::op::avg{});
            on_device data(fake, input);
            chorus::allreduce(comm, data.span(), chorus::op::avg{});
            differ += !same_bits(data.read(), host);

            on_device in(fake, input), out(fake, std::vector<float>(count, -1.0f));
            chorus::allreduce(comm, in.in(), out.span(), chorus::op::avg{});
            differ += !same_bits(out.read(), host) || !same_bits(in.read(), input);
          }
        }) == 0);
}

TEST_CASE("front doors: one rank's allreduce leaves device memory where it is; into an output, one device copy") {
  fake_device fake;
  fake.set_network_reaches(false);
  chorus::cuda::device gpu(fake);
  chorus::cuda::router router(gpu, {4096, 3});
  const chorus::cuda::route_front_doors routing(router);
  std::size_t in_place = 1, into_output = 0;
  std::vector<float> result, input;
  chorus::run_threads(
      1,
      [&](communicator& comm) {
        input = input_of(0, 5000);
        on_device data(fake, input), out(fake, std::vector<float>(input.size(), -1.0f));
        std::size_t before = fake.copied_bytes();
        chorus::allreduce(comm, data.span(), chorus::op::avg{});
        in_place = fake.copied_bytes() - before;
        before = fake.copied_bytes();
        chorus::allreduce(comm, data.in(), out.span(), chorus::op::sum{});
        into_output = fake.copied_bytes() - before;
        result = out.read();
      },
      quick());
  CHECK(in_place == 0);
  CHECK(into_output == input.size() * sizeof(float));
  CHECK(same_bits(result, input));
}

// The waits for the device's copies are polls in every progress mode: in
// block mode a wait asleep on the network's event descriptor sees a
// finished copy only at the next message or after its 100 ms slice (on an
// H200 shared by 3 ranks, an in-place allreduce of 8 B took 47 ms so, and
// 0.3 ms, as in spin mode, once it polled). Here the fake device's copies
// finish within the 200 us a block-mode wait yields first: this case keeps
// the path correct in every mode; the H200 figure is scripts/test-gpu's.
TEST_CASE("front doors: device buffers stage with the host's bits in every progress mode") {
  fake_device fake;
  fake.set_network_reaches(false);
  chorus::cuda::device gpu(fake);
  chorus::cuda::router router(gpu, {4096, 3});
  const chorus::cuda::route_front_doors routing(router);
  for (auto mode : {chorus::transport::progress_mode::spin, chorus::transport::progress_mode::yield,
                    chorus::transport::progress_mode::block}) {
    CAPTURE(chorus::transport::to_string(mode));
    chorus::options options = quick();
    options.progress = mode;
    std::atomic<int> differ{0};
    chorus::run_threads(
        3,
        [&](communicator& comm) {
          for (const std::size_t count : {std::size_t{1}, std::size_t{1000}, std::size_t{5001}}) {
            const std::vector<float> input = input_of(comm.rank(), count);
            std::vector<float> host = input;
            chorus::allreduce(comm, std::span(host));
            on_device data(fake, input);
            chorus::allreduce(comm, data.span());
            std::vector<float> host_root = input;
            chorus::broadcast(comm, std::span(host_root), 1);
            on_device root(fake, input);
            chorus::broadcast(comm, root.span(), 1);
            differ += !same_bits(data.read(), host) || !same_bits(root.read(), host_root);
          }
        },
        options);
    CHECK(differ.load() == 0);
  }
}

TEST_CASE("front doors: broadcast, reduce, gather and scatter from device memory") {
  CHECK(differing_ranks([](communicator& comm, fake_device& fake, std::atomic<int>& differ) {
          const int n = comm.size(), root = n - 1;
          for (const std::size_t count : counts) {
            const std::vector<float> mine = input_of(comm.rank(), count);
            std::vector<float> host = mine;
            chorus::broadcast(comm, std::span(host), root);
            on_device data(fake, mine);
            chorus::broadcast(comm, data.span(), root);
            differ += !same_bits(data.read(), host);

            std::vector<float> reduced(count, -1.0f);
            chorus::reduce(comm, std::span<const float>(mine), std::span(reduced), 1 % n, chorus::op::sum{});
            on_device in(fake, mine), out(fake, std::vector<float>(count, -1.0f));
            chorus::reduce(comm, in.in(), out.span(), 1 % n, chorus::op::sum{});
            differ += !same_bits(out.read(), reduced);

            const std::size_t all_count = count * static_cast<std::size_t>(n);
            std::vector<float> gathered(all_count, -1.0f);
            chorus::gather(comm, std::span<const float>(mine), std::span(gathered), root);
            on_device all(fake, std::vector<float>(all_count, -1.0f));
            chorus::gather(comm, in.in(), all.span(), root);
            differ += !same_bits(all.read(), gathered);  // off the root both stay untouched

            const std::vector<float> source = input_of(root, all_count, 5);
            std::vector<float> piece(count, -1.0f);
            chorus::scatter(comm, std::span<const float>(source), std::span(piece), root);
            on_device whole(fake, source), part(fake, std::vector<float>(count, -1.0f));
            chorus::scatter(comm, whole.in(), part.span(), root);
            differ += !same_bits(part.read(), piece);
          }
        }) == 0);
}

TEST_CASE("front doors: allgather, reduce_scatter and alltoall from device memory") {
  CHECK(differing_ranks([](communicator& comm, fake_device& fake, std::atomic<int>& differ) {
          const auto n = static_cast<std::size_t>(comm.size());
          for (const std::size_t count : counts) {
            const std::vector<float> mine = input_of(comm.rank(), count);
            std::vector<float> host(count * n, -1.0f);
            chorus::allgather(comm, std::span<const float>(mine), std::span(host));
            on_device in(fake, mine), all(fake, std::vector<float>(count * n, -1.0f));
            chorus::allgather(comm, in.in(), all.span());
            differ += !same_bits(all.read(), host);

            const std::vector<float> full = input_of(comm.rank(), count * n, 3);
            std::vector<float> block(count, -1.0f);
            chorus::reduce_scatter(comm, std::span<const float>(full), std::span(block), chorus::op::sum{});
            on_device whole(fake, full), part(fake, std::vector<float>(count, -1.0f));
            chorus::reduce_scatter(comm, whole.in(), part.span(), chorus::op::sum{});
            differ += !same_bits(part.read(), block);

            std::vector<float> exchanged(count * n, -1.0f);
            chorus::alltoall(comm, std::span<const float>(full), std::span(exchanged));
            on_device received(fake, std::vector<float>(count * n, -1.0f));
            chorus::alltoall(comm, whole.in(), received.span());
            differ += !same_bits(received.read(), exchanged);
          }
        }) == 0);
}

TEST_CASE("front doors: compressed allreduce (with error feedback), allgather and broadcast from device memory") {
  CHECK(differing_ranks([](communicator& comm, fake_device& fake, std::atomic<int>& differ) {
          const auto n = static_cast<std::size_t>(comm.size());
          for (const std::size_t count : counts) {
            const std::vector<float> mine = input_of(comm.rank(), count);
            chorus::codec::error_feedback host_feedback{chorus::codec::int8{}}, device_feedback{chorus::codec::int8{}};
            std::vector<float> host = mine;
            on_device data(fake, mine);
            for (int round = 0; round < 2; ++round) {  // the second round uses the residuals of the first
              chorus::allreduce(comm, std::span(host), chorus::op::avg{}, host_feedback);
              chorus::allreduce(comm, data.span(), chorus::op::avg{}, device_feedback);
            }
            differ += !same_bits(data.read(), host);

            std::vector<float> gathered(count * n, -1.0f);
            chorus::allgather(comm, std::span<const float>(mine), std::span(gathered), chorus::codec::fp16{});
            on_device in(fake, mine), all(fake, std::vector<float>(count * n, -1.0f));
            chorus::allgather(comm, in.in(), all.span(), chorus::codec::fp16{});
            differ += !same_bits(all.read(), gathered);

            std::vector<float> sent = mine;
            chorus::broadcast(comm, std::span(sent), 0, chorus::codec::bf16{});
            on_device cast(fake, mine);
            chorus::broadcast(comm, cast.span(), 0, chorus::codec::bf16{});
            differ += !same_bits(cast.read(), sent);
          }
        }) == 0);
}

TEST_CASE("front doors: fused allreduce of device tensors, and a non-blocking allreduce on the caller's stream") {
  CHECK(differing_ranks([](communicator& comm, fake_device& fake, std::atomic<int>& differ) {
          std::vector<std::vector<float>> host;
          std::vector<std::unique_ptr<on_device>> device;
          for (const std::size_t count : counts) {
            host.push_back(input_of(comm.rank(), count, static_cast<int>(count)));
            device.push_back(std::make_unique<on_device>(fake, host.back()));
          }
          std::vector<std::span<float>> host_tensors, device_tensors;
          for (std::size_t t = 0; t < host.size(); ++t) {
            host_tensors.emplace_back(host[t]);
            device_tensors.push_back(device[t]->span());
          }
          chorus::fused_allreduce(comm, host_tensors, chorus::op::sum{}, 8192);
          chorus::fused_allreduce(comm, device_tensors, chorus::op::sum{}, 8192);
          for (std::size_t t = 0; t < host.size(); ++t) differ += !same_bits(device[t]->read(), host[t]);

          // The input is written by a "kernel" on the caller's stream after a
          // delay: the worker thread must order on that stream too.
          const std::size_t count = 4099;
          const std::vector<float> input = input_of(comm.rank(), count);
          std::vector<float> expected = input;
          chorus::allreduce(comm, std::span(expected));
          on_device data(fake, std::vector<float>(count, 0.0f));
          const chorus::cuda::stream_handle stream = fake.create_stream();
          fake.launch(stream, [&] {
            std::this_thread::sleep_for(20ms);
            fake.write(data.data, std::span<const float>(input));
          });
          {
            const chorus::cuda::stream_scope ordered(stream);
            chorus::iallreduce(comm, data.span()).wait();
          }
          fake.synchronize(stream);
          fake.destroy_stream(stream);
          differ += !same_bits(data.read(), expected);
        }) == 0);
}

TEST_CASE("front doors: blocking send and recv stage device memory; non-blocking ones refuse it") {
  CHECK(differing_ranks([](communicator& comm, fake_device& fake, std::atomic<int>& differ) {
          const int n = comm.size(), next = (comm.rank() + 1) % n, previous = (comm.rank() + n - 1) % n;
          for (const std::size_t count : counts) {
            if (n == 1) break;
            const std::vector<float> mine = input_of(comm.rank(), count);
            on_device out(fake, mine), in(fake, std::vector<float>(count, -1.0f));
            if (comm.rank() % 2 == 0) {
              comm.send(out.in(), next, 3);
              comm.recv(in.span(), previous, 3);
            } else {
              comm.recv(in.span(), previous, 3);
              comm.send(out.in(), next, 3);
            }
            differ += !same_bits(in.read(), input_of(previous, count));
          }
          on_device buffer(fake, std::vector<float>(8, 1.0f));
          try {
            auto request = comm.isend(buffer.in(), 0, 4);
            ++differ;  // UCX here moves host memory only
          } catch (const chorus::error& refused) {
            differ += refused.category() != chorus::errc::invalid_argument;
          }
        }) == 0);
}

namespace {

// The trainer's step on its own memory: a deterministic pull of each
// element towards a rank-specific target (stands in for a kernel).
void local_step(std::span<float> x, int rank, int step) {
  for (std::size_t k = 0; k < x.size(); ++k)
    x[k] -= 0.1f * (x[k] - static_cast<float>((rank + 1) * (step + 1)) * 0.01f * static_cast<float>(k % 17));
}

}  // namespace

TEST_CASE("schemes over device parameters: D-PSGD gives the same bits as over host parameters") {
  namespace avg = chorus::averaging;
  CHECK(differing_ranks([](communicator& comm, fake_device& fake, std::atomic<int>& differ) {
          // Two tensors, so the mixing walks tensor boundaries; sizes that do not divide.
          const std::vector<std::size_t> sizes = {7, 4099};
          std::vector<std::vector<float>> host;
          std::vector<std::unique_ptr<on_device>> device;
          for (std::size_t t = 0; t < sizes.size(); ++t) {
            host.push_back(input_of(comm.rank(), sizes[t], static_cast<int>(t)));
            device.push_back(std::make_unique<on_device>(fake, host.back()));
          }
          const auto train = [&](avg::parameters model, auto&& apply) {
            avg::dpsgd scheme(comm, model);
            for (int step = 0; step < 4; ++step) scheme.step([] {}, [&] { apply(step); });
            scheme.finish();
          };
          train(avg::parameters({std::span(host[0]), std::span(host[1])}), [&](int step) {
            for (auto& tensor : host) local_step(tensor, comm.rank(), step);
          });
          train(avg::parameters({device[0]->span(), device[1]->span()}), [&](int step) {
            for (auto& tensor : device) {  // the "kernel": through the device memory's own alias
              std::vector<float> values = tensor->read();
              local_step(values, comm.rank(), step);
              fake.write(tensor->data, std::span<const float>(values));
            }
          });
          for (std::size_t t = 0; t < sizes.size(); ++t) differ += !same_bits(device[t]->read(), host[t]);
        }) == 0);
}

TEST_CASE("schemes over device parameters: local SGD, sync EASGD and allreduce-SGD give the same bits as over host") {
  namespace avg = chorus::averaging;
  for (int scheme = 0; scheme < 3; ++scheme) {
    CAPTURE(scheme);
    CHECK(differing_ranks([&](communicator& comm, fake_device& fake, std::atomic<int>& differ) {
            const std::size_t count = 4099;
            std::vector<float> host = input_of(comm.rank(), count), host_grads = input_of(comm.rank(), count, 9);
            on_device device(fake, host), device_grads(fake, host_grads);
            const auto train = [&](avg::parameters model, avg::parameters grads, auto&& apply) {
              const auto run = [&](auto&& chosen) {
                for (int step = 0; step < 4; ++step) chosen.step([] {}, [&] { apply(step); });
                chosen.finish();
              };
              if (scheme == 0)
                run(avg::local_sgd(comm, model, {.period = 2}));
              else if (scheme == 1)
                run(avg::easgd(comm, model));
              else
                run(avg::allreduce_sgd(comm, model, grads));
            };
            train(std::span(host), std::span(host_grads), [&](int step) { local_step(host, comm.rank(), step); });
            train(device.span(), device_grads.span(), [&](int step) {
              std::vector<float> values = device.read();
              local_step(values, comm.rank(), step);
              fake.write(device.data, std::span<const float>(values));
            });
            differ += !same_bits(device.read(), host) || !same_bits(device_grads.read(), host_grads);
          }) == 0);
  }
}

TEST_CASE("schemes over device parameters: GoSGD gossip keeps the average; finish leaves it on every rank") {
  namespace avg = chorus::averaging;
  std::atomic<int> off{0};
  CHECK(differing_ranks([&](communicator& comm, fake_device& fake, std::atomic<int>& differ) {
          const std::size_t count = 4099;
          on_device model(fake, input_of(comm.rank(), count));
          {
            avg::gosgd scheme(comm, avg::parameters(model.span()), {.push_probability = 0.7});
            for (int step = 0; step < 10; ++step) scheme.step([] {}, [] {});  // no training: only gossip
            scheme.finish();
          }
          // Gossip conserves sum(weight x); finish is its consensus: the mean
          // of the initial models, the same on every rank.
          std::vector<double> mean(count, 0.0);
          for (int r = 0; r < comm.size(); ++r) {
            const std::vector<float> x = input_of(r, count);
            for (std::size_t k = 0; k < count; ++k) mean[k] += static_cast<double>(x[k]) / comm.size();
          }
          const std::vector<float> ended = model.read();
          std::vector<float> first = ended;
          chorus::broadcast(comm, std::span(first), 0);
          differ += !same_bits(ended, first);
          for (std::size_t k = 0; k < count; ++k)
            if (std::abs(ended[k] - mean[k]) > 1e-3 * (1.0 + std::abs(mean[k]))) {
              ++off;
              ++differ;
              break;
            }
        }) == 0);
  CHECK(off == 0);
}

TEST_CASE("schemes over device parameters: async EASGD starts from the server's model and ends on one centre") {
  namespace avg = chorus::averaging;
  for (const bool training : {false, true}) {
    CAPTURE(training);
    CHECK(differing_ranks([&](communicator& comm, fake_device& fake, std::atomic<int>& differ) {
            const std::size_t count = 4099;
            on_device model(fake, input_of(comm.rank(), count));
            {
              avg::easgd_async scheme(comm, avg::parameters(model.span()), {.alpha = 0.1, .tau = 1, .server = 0});
              for (int step = 0; step < 6; ++step)
                scheme.step([] {},
                            [&] {
                              if (!training) return;
                              std::vector<float> values = model.read();  // the trainer's "kernel"
                              local_step(values, comm.rank(), step);
                              fake.write(model.data, std::span<const float>(values));
                            });
              scheme.finish();
            }
            const std::vector<float> ended = model.read();
            std::vector<float> server = ended;
            chorus::broadcast(comm, std::span(server), 0);
            differ += !same_bits(ended, server);  // one centre on every rank
            // Without training every pull moves nothing: the centre is the server's start.
            if (!training) differ += !same_bits(ended, input_of(0, count));
          }) == 0);
  }
}

TEST_CASE("schemes over device parameters: the host optimiser refuses them") {
  fake_device fake;
  chorus::cuda::device gpu(fake);
  chorus::cuda::router router(gpu);
  const chorus::cuda::route_front_doors routing(router);
  on_device x(fake, std::vector<float>(5, 1.0f)), g(fake, std::vector<float>(5, 1.0f));
  chorus::averaging::sgd optimiser(x.span(), {.learning_rate = 0.1});
  CHECK_THROWS_AS(optimiser.apply(g.span()), chorus::error);
  CHECK(x.read() == std::vector<float>(5, 1.0f));  // untouched
}

TEST_CASE("CHORUS_CHECK=1: device memory on one rank and host memory on the others is a mismatch on every rank") {
  ::setenv("CHORUS_CHECK", "1", 1);
  for (const bool direct : {false, true}) {
    CAPTURE(direct);
    fake_device fake;
    fake.set_network_reaches(direct);  // the rank with device memory takes the staged or the direct path
    chorus::cuda::device gpu(fake);
    chorus::cuda::router router(gpu, {4096, 3});
    const chorus::cuda::route_front_doors routing(router);
    for (const int ranks : {3, 4}) {
      CAPTURE(ranks);
      chorus::run_threads(
          ranks,
          [&](communicator& comm) {
            const std::vector<float> input = input_of(comm.rank(), 7);
            std::vector<float> host = input;
            on_device device(fake, input);
            const bool odd_one = comm.rank() == 1;
            chorus_test::expect_error([&] { chorus::allreduce(comm, odd_one ? device.span() : std::span(host)); },
                                      chorus::errc::mismatch,
                                      "rank 1 calls allreduce(count 7, float32, sum, device memory)");
            chorus_test::expect_error([&] { chorus::broadcast(comm, odd_one ? device.span() : std::span(host), 0); },
                                      chorus::errc::mismatch,
                                      "rank 1 calls broadcast(count 7, float32, root 0, device memory)");
            CHECK(same_bits(host, input));  // nothing was written
            CHECK(same_bits(device.read(), input));
            // An empty device buffer moves nothing: the same call as an empty host one.
            std::vector<float> none;
            on_device empty(fake, none);
            chorus::allreduce(comm, odd_one ? empty.span() : std::span(none));
            chorus::allreduce(comm, device.span());  // agreeing again: it runs
          },
          quick());
    }
  }
  ::unsetenv("CHORUS_CHECK");
}

TEST_CASE("a tensor window stages device tensors: put, accumulate, publish, get and update give the host's bits") {
  for (const std::size_t count : counts) {
    CAPTURE(count);
    const int differ = differing_ranks([&](communicator& comm, fake_device& fake, std::atomic<int>& wrong) {
      const std::vector<float> input = input_of(comm.rank(), count);
      std::vector<float> host = input;
      on_device device(fake, input);
      chorus::window on_host(comm, host), on_gpu(comm, device.in());
      std::vector<chorus::neighbour_weight> half;
      for (int source : on_host.sources()) half.push_back({source, 0.5 / comm.size()});
      for (auto* win : {&on_host, &on_gpu}) {
        const bool gpu = win == &on_gpu;
        win->put(gpu ? device.in() : std::span<const float>(host));
        win->accumulate(gpu ? device.in() : std::span<const float>(host));
        win->quiesce();
        win->update(gpu ? device.span() : std::span<float>(host), 0.5, half);
        win->publish(gpu ? device.in() : std::span<const float>(host));
        comm.barrier();
        win->get();
        win->update(gpu ? device.span() : std::span<float>(host), 0.25, half, true);
      }
      if (!same_bits(device.read(), host)) ++wrong;
      comm.barrier();
      on_host.free();
      on_gpu.free();
    });
    CHECK(differ == 0);
  }
}
