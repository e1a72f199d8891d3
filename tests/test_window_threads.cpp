// Tensor windows over the real UCX transport, ranks as threads: every
// operation against a serial reference (odd rank counts, 0 and 1 elements,
// sizes that do not divide), concurrent writers into one target, a stress
// test that would catch a torn read, codecs with error feedback, bounded
// waits and bad input; the relay that carries window operations as
// messages. ctest runs it twice: as is (same-host peers are reached through
// mapped memory) and with UCX_TLS=tcp (relayed messages).
#include <chorus/chorus.hpp>
#include <chorus/window/window.hpp>

#include "expect_error.hpp"
#include "support.hpp"
#include "window_values.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace std::chrono_literals;
using chorus::communicator;
using chorus::neighbour_weight;
using chorus_test::expect_error;
using chorus_test::quick;
using chorus_test::ring_sources;
using chorus_test::value_of;
using chorus_test::values_of;

namespace {

const std::vector<std::size_t> sizes = {0, 1, 7, 4099};

std::atomic<int> wrong{0};

void expect_close(float got, double expected, double tolerance = 1e-5) {
  if (std::fabs(static_cast<double>(got) - expected) > tolerance * (1.0 + std::fabs(expected))) ++wrong;
}

// The put-then-update cases: each rank puts x with weight 1/2 + t/8 to
// target t, then updates with self weight 1/2 and 1/4 + s/16 from source s.
std::vector<neighbour_weight> put_weights(const std::vector<int>& targets) {
  std::vector<neighbour_weight> to;  // a weight per target, known to the target too
  for (int target : targets) to.push_back({target, 0.5 + 0.125 * target});
  return to;
}
std::vector<neighbour_weight> update_weights(const std::vector<int>& sources) {
  std::vector<neighbour_weight> from;
  for (int source : sources) from.push_back({source, 0.25 + 0.0625 * source});
  return from;
}
// Element k of rank me's tensor after the put and update, in double.
double after_put_update(int me, const std::vector<int>& sources, std::size_t k) {
  double expected = 0.5 * value_of(me, 0, k);
  for (int source : sources) {
    const double put_weight = 0.5 + 0.125 * me;  // what the source gave this rank
    expected += (0.25 + 0.0625 * source) * static_cast<double>(static_cast<float>(put_weight) * value_of(source, 0, k));
  }
  return expected;
}

// body(comm, win, x) on every rank, for each rank count and size: x is the
// rank's values_of(rank, 0, size), win a window over it with a ring's sources.
template <class Body>
void on_ring_windows(std::initializer_list<int> counts, Body body) {
  for (int n : counts)
    for (std::size_t size : sizes) {
      CAPTURE(n);
      CAPTURE(size);
      wrong = 0;
      chorus::run_threads(
          n,
          [&](communicator& comm) {
            std::vector<float> x = values_of(comm.rank(), 0, size);
            chorus::window win(comm, x, {.sources = ring_sources(comm.rank(), n)});
            body(comm, win, x);
          },
          quick());
      CHECK(wrong == 0);
    }
}

}  // namespace

namespace {

// UCX 1.22 has no remote atomics over TCP (1.13 emulated them): under
// CHORUS_WINDOW_NETWORK=rma and UCX_TLS=tcp,self with UCX 1.22 or later
// (ctest test_window_rma_over_tcp, in a build against PyPI's UCX) the case
// below runs; elsewhere it is skipped.
bool rma_over_tcp_without_atomics() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  const char* network = std::getenv("CHORUS_WINDOW_NETWORK");
  const char* transports = std::getenv("UCX_TLS");
  return (major > 1 || minor >= 22) && network != nullptr && std::string(network) == "rma" && transports != nullptr &&
         std::string(transports) == "tcp,self";
}

}  // namespace

TEST_CASE("UCX RMA without remote atomics (UCX 1.22 over TCP) is a clear error at the window's creation" *
          doctest::skip(!rma_over_tcp_without_atomics())) {
  for (const int n : {2, 3}) {
    CAPTURE(n);
    std::atomic<int> refused{0};
    chorus::run_threads(
        n,
        [&](communicator& comm) {
          const std::vector<float> x = values_of(comm.rank(), 0, 7);
          expect_error([&] { chorus::window win(comm, x); }, chorus::errc::unavailable,
                       "no remote atomics over the transport it chose");
          ++refused;
        },
        quick());
    CHECK(refused == n);
  }
}

TEST_CASE("put, then update, equals self_weight x + the sum of the weighted neighbours' tensors") {
  on_ring_windows({1, 2, 5}, [](communicator& comm, auto& win, std::vector<float>& x) {
    const int me = comm.rank();
    const std::size_t size = x.size();
    win.put(x, put_weights(win.targets()));
    win.wait_versions(1);
    for (int source : win.sources()) CHECK(win.version(source) == 1);
    std::vector<float> out = x;
    win.update(out, 0.5, update_weights(win.sources()));
    for (std::size_t k = 0; k < size; ++k) expect_close(out[k], after_put_update(me, win.sources(), k));
    for (int source : win.sources()) CHECK(win.version(source) == 0);
    CHECK(win.p() == doctest::Approx(0.5 + 0.0 + [&] {
            double p = 0;
            for (int source : win.sources()) p += (0.25 + 0.0625 * source) * (0.5 + 0.125 * me);
            return p;
          }()));
    win.free();
  });
}

TEST_CASE(
    "accumulates sum exactly once each, including those kept pending (the target had not read, the link was busy)") {
  const int n = 5;
  for (std::size_t size : sizes) {
    CAPTURE(size);
    wrong = 0;
    chorus::run_threads(
        n,
        [&](communicator& comm) {
          const int me = comm.rank();
          std::vector<float> x(size);
          chorus::window win(comm, x);               // every rank a source of every other
          for (int round = 0; round < 4; ++round) {  // rounds 2 and 3 wait as pending sums
            const std::vector<float> values = values_of(me, round, size);
            if (round % 2 == 0)
              win.accumulate(values, {});
            else  // over relayed messages (UCX_TLS=tcp) it waits, summed, while the link carries the last
              (void)win.accumulate_nonblocking(values, {});
          }
          win.quiesce();
          win.collect(
              [&](int source, std::span<const float> value, double p) {
                if (std::fabs(p - 4.0) > 1e-12) ++wrong;
                for (std::size_t k = 0; k < size; ++k) {
                  double expected = 0;
                  for (int round = 0; round < 4; ++round) expected += value_of(source, round, k);
                  expect_close(value[k], expected);
                }
              },
              true);
          win.collect([&](int, std::span<const float> value, double p) {  // reset left zeros
            if (p != 0.0) ++wrong;
            for (float v : value) wrong += v != 0.0f;
          });
          win.free();
        },
        quick());
    CHECK(wrong == 0);
  }
}

TEST_CASE("in_quiesce(target) is true once the target entered quiesce(), until the writer's own returns") {
  // Each round, one rank (the first) enters quiesce() at once; the others
  // that write to it wait until they see it there, then enter too. Before a
  // round's barrier, and after a quiesce() returns (before the next
  // barrier), no target can be in quiesce().
  on_ring_windows({1, 2, 5}, [](communicator& comm, auto& win, std::vector<float>&) {
    const int me = comm.rank(), n = comm.size();
    const auto none_in = [&] {
      for (int target : win.targets()) wrong += win.in_quiesce(target) ? 1 : 0;
    };
    expect_error([&] { (void)win.in_quiesce(me); }, chorus::errc::invalid_argument, "is not a target");
    for (int round = 0; round < 3; ++round) {
      const int first = round % n;
      none_in();
      comm.barrier();
      const std::vector<int> targets = win.targets();
      if (me != first && std::find(targets.begin(), targets.end(), first) != targets.end()) {
        const auto deadline = std::chrono::steady_clock::now() + 30s;
        while (!win.in_quiesce(first) && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
        if (!win.in_quiesce(first)) ++wrong;
      }
      win.quiesce();
      none_in();
    }
    win.free();
  });
}

TEST_CASE("ready(target) is false while two of this rank's accumulates wait unread there, true once read") {
  // A slot holds two accumulates (slot.hpp); quiesce() reads them, and the
  // writer learns so when the target's counter comes back.
  on_ring_windows({1, 2, 5}, [](communicator& comm, auto& win, std::vector<float>& x) {
    expect_error([&] { (void)win.ready(comm.rank()); }, chorus::errc::invalid_argument, "is not a target");
    const std::vector<int> targets = win.targets();
    const auto all_ready = [&] {
      return std::all_of(targets.begin(), targets.end(), [&](int target) { return win.ready(target); });
    };
    for (int round = 0; round < 3; ++round) {
      const auto deadline = std::chrono::steady_clock::now() + 30s;
      while (!all_ready() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      if (!all_ready()) ++wrong;
      comm.barrier();  // every rank has read all it was sent and asked, and reads nothing until quiesce()
      win.accumulate(x);
      win.accumulate(x);
      for (int target : targets) wrong += win.ready(target) ? 1 : 0;
      comm.barrier();  // no rank reads (in quiesce()) before every rank has asked
      win.quiesce();
    }
    win.free();
  });
}

TEST_CASE("get reads each source's published tensor, and a later put supersedes nothing it did not see") {
  const int n = 3;
  wrong = 0;
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        const int me = comm.rank();
        const std::size_t size = 1001;
        chorus::window win(comm, values_of(me, 0, size));
        win.get();  // the values published at creation
        win.collect([&](int source, std::span<const float> value, double p) {
          if (p != 1.0) ++wrong;
          for (std::size_t k = 0; k < size; ++k) wrong += value[k] != value_of(source, 0, k);
        });
        comm.barrier();
        win.set_p(2.0);
        win.publish(values_of(me, 7, size));
        comm.barrier();
        std::vector<neighbour_weight> from;
        for (int source : win.sources()) from.push_back({source, 0.5});
        win.get(from);
        for (int source : win.sources()) CHECK(win.version(source) == 1);
        win.collect([&](int source, std::span<const float> value, double p) {
          if (p != 1.0) ++wrong;  // 0.5 * 2
          for (std::size_t k = 0; k < size; ++k) wrong += value[k] != 0.5f * value_of(source, 7, k);
        });
        win.free();
      },
      quick());
  CHECK(wrong == 0);
}

TEST_CASE("non-blocking forms complete as their blocking twins do, in the order they were made") {
  on_ring_windows({2, 5}, [](communicator& comm, auto& win, std::vector<float>& x) {
    const int me = comm.rank(), n = comm.size();
    const std::size_t size = x.size();
    chorus::window_request put = win.put_nonblocking(x, put_weights(win.targets()));
    x.assign(size, -1.0f);  // the values may change at once
    put.wait();
    CHECK(put.test());
    win.wait_versions(1);
    std::vector<float> out = values_of(me, 0, size);
    chorus::window_request update = win.update_nonblocking(out, 0.5, update_weights(win.sources()));
    while (!update.test()) std::this_thread::yield();
    for (std::size_t k = 0; k < size; ++k) expect_close(out[k], after_put_update(me, win.sources(), k));
    for (int source : win.sources()) CHECK(win.version(source) == 0);

    // get on the background thread; collect() waits for it.
    win.publish(values_of(me, 3, size));
    comm.barrier();
    std::vector<neighbour_weight> halves;
    for (int source : win.sources()) halves.push_back({source, 0.5});
    chorus::window_request got = win.get_nonblocking(halves);
    win.collect(
        [&](int source, std::span<const float> value, double) {
          for (std::size_t k = 0; k < size; ++k) wrong += value[k] != 0.5f * value_of(source, 3, k);
        },
        true);  // the accumulates below start from zeros
    CHECK(got.test());
    comm.barrier();  // no accumulate lands before that reset

    // Three accumulates: the third waits pending until its target
    // reads (in quiesce()); each request completes.
    win.set_p(1.0);  // the update changed it
    std::vector<chorus::window_request> sums;
    for (int round = 0; round < 3; ++round) sums.push_back(win.accumulate_nonblocking(values_of(me, round, size)));
    win.quiesce();
    for (auto& sum : sums) CHECK(sum.test());
    win.collect(
        [&](int source, std::span<const float> value, double p) {
          if (std::fabs(p - 3.0) > 1e-12) ++wrong;
          for (std::size_t k = 0; k < size; ++k)
            expect_close(value[k],
                         static_cast<double>(value_of(source, 0, k)) + value_of(source, 1, k) + value_of(source, 2, k));
        },
        true);

    comm.barrier();  // no put below lands before that collect

    // An error on the background thread is raised by its request
    // and then not again; unasked, by the window's next call.
    const int stranger = n;  // not a rank
    chorus::window_request bad = win.get_nonblocking({{stranger, 1.0}});
    expect_error([&] { bad.wait(); }, chorus::errc::invalid_argument, "is not a source");
    expect_error([&] { (void)bad.test(); }, chorus::errc::invalid_argument, "is not a source");
    win.update(out, 1.0, {});
    (void)win.get_nonblocking({{stranger, 1.0}});
    expect_error([&] { win.flush(); }, chorus::errc::invalid_argument, "is not a source");
    std::vector<float> short_out(size + 1);
    expect_error([&] { (void)win.update_nonblocking(short_out); }, chorus::errc::invalid_argument,
                 "elements for a window of");
    chorus::window_request last = win.put_nonblocking(out);
    win.free();
    expect_error([&] { (void)last.test(); }, chorus::errc::invalid_argument, "window is freed");
  });
}

TEST_CASE("a reader never sees a torn tensor while writers rewrite it as fast as they can") {
  // Writers put tensors whose every element (and p) is the round number; a
  // reader that mixed two rounds would see elements that differ.
  const int n = 3;
  const std::size_t size = 50000;
  wrong = 0;
  std::atomic<int> reads{0};
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        const int me = comm.rank();
        std::vector<float> x(size, 1.0f);  // published with p = 1
        chorus::window win(comm, x);
        if (me != 0) {
          for (int round = 1; round <= 400; ++round) {
            std::fill(x.begin(), x.end(), static_cast<float>(round));
            win.set_p(round);
            if (round % 2 == 0)
              win.put(x, {});
            else
              win.put_nonblocking(x, {});
            win.publish(x);
          }
          win.flush();
        } else {
          std::vector<std::uint64_t> last(static_cast<std::size_t>(n), 0);
          for (int sweep = 0; sweep < 300; ++sweep) {
            if (sweep % 3 == 0) win.get();
            win.collect([&](int, std::span<const float> value, double p) {
              ++reads;
              for (float v : value) wrong += v != static_cast<float>(p);
            });
          }
        }
        comm.barrier();
        win.free();
      },
      quick());
  CHECK(wrong == 0);
  CHECK(reads > 0);
}

TEST_CASE("concurrent writers into one target: each source's slot holds exactly its own sum") {
  const int n = 7;
  const std::size_t size = 4099;
  wrong = 0;
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        const int me = comm.rank();
        std::vector<float> x(size);
        const std::vector<int> sources = me == 0 ? std::vector<int>{1, 2, 3, 4, 5, 6} : std::vector<int>{};
        chorus::window win(comm, x, {.sources = sources});
        if (me != 0) {
          CHECK(win.targets() == std::vector<int>{0});
          for (int round = 0; round < 20; ++round) win.accumulate(values_of(me, round, size), {{0, 1.0}});
          win.quiesce();
        } else {
          CHECK(win.targets().empty());
          // Read while they write: every read applies whole entries only.
          for (int sweep = 0; sweep < 200; ++sweep) win.collect([](int, std::span<const float>, double) {});
          win.quiesce();
        }
        comm.barrier();
        if (me == 0) {
          win.collect([&](int source, std::span<const float> value, double p) {
            if (p != 20.0) ++wrong;
            for (std::size_t k = 0; k < size; ++k) {
              float expected = 0.0f;  // summed in float in the order written
              for (int round = 0; round < 20; ++round) expected += value_of(source, round, k);
              expect_close(value[k], expected, 1e-5);
            }
          });
        }
        win.free();
      },
      quick());
  CHECK(wrong == 0);
}

TEST_CASE("codecs on accumulates: each slot holds what a serial error-feedback encoder would have sent") {
  const int n = 3;
  const std::size_t size = 4099;
  const int rounds = 6;
  for (const std::string name :
       {"fp16", "bf16", "int8", "fp8_e5m2", "fp4_e2m1", "onebit", "topk:0.1", "randomk:0.1:7"}) {
    CAPTURE(name);
    wrong = 0;
    chorus::run_threads(
        n,
        [&](communicator& comm) {
          const int me = comm.rank();
          const chorus::codec::any_codec codec = chorus::codec::by_name(name);
          std::vector<float> x(size);
          chorus::window win(comm, x, {.codec = codec});
          for (int round = 0; round < rounds; ++round) {
            win.accumulate(values_of(me, round, size), {});
            win.quiesce();
          }
          win.collect([&](int source, std::span<const float> value, double) {
            // The reference: the source's deltas through one error-feedback
            // encoder of the same codec, decoded and summed in order. The
            // source encoded for its targets in ascending order on one codec
            // (random-k counts its calls: the other target's encodes are
            // replayed to keep the count).
            const chorus::codec::any_codec fresh = chorus::codec::by_name(name);
            chorus::codec::any_error_feedback feedback(fresh);
            std::vector<std::byte> bytes(fresh.encoded_bytes(size));
            std::vector<float> expected(size, 0.0f);
            for (int round = 0; round < rounds; ++round) {
              const std::vector<float> delta = values_of(source, round, size);
              for (int target = 0; target < n; ++target) {
                if (target == source) continue;
                if (target != me) {
                  fresh.encode(delta, bytes);
                  continue;
                }
                feedback.visit([&](auto& f) { f.encode(std::span<const float>(delta), std::span<std::byte>(bytes)); });
                fresh.decode_add(bytes, expected);
              }
            }
            for (std::size_t k = 0; k < size; ++k) wrong += value[k] != expected[k];
          });
          comm.barrier();
          win.free();
        },
        quick());
    CHECK(wrong == 0);
  }
}

TEST_CASE("waits are bounded, and bad input is a clear error on every rank") {
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        std::vector<float> x(5, 1.0f);
        chorus::window win(comm, x);
        std::vector<float> wrong_size(4);
        expect_error([&] { win.put(wrong_size); }, chorus::errc::invalid_argument, "4 elements for a window of 5");
        expect_error([&] { (void)win.version(comm.rank()); }, chorus::errc::invalid_argument, "is not a source");
        expect_error([&] { win.update(x, 1.0, {{comm.rank(), 0.5}}); }, chorus::errc::invalid_argument,
                     "is not a source");
        comm.barrier();
        win.free();
      },
      quick());
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        std::vector<float> x(5, 1.0f);
        chorus::window win(comm, x);
        // Nobody puts: every rank's wait ends at the timeout, or, over TCP,
        // with the peer failure of a rank whose wait ended first and left
        // (the window is then dropped without free(): its memory waits for
        // the transport).
        try {
          win.wait_versions(1);
          FAIL("wait_versions returned without versions");
        } catch (const chorus::error& failure) {
          CAPTURE(std::string(failure.what()));
          CHECK((failure.category() == chorus::errc::timeout || failure.category() == chorus::errc::peer_failure));
          CHECK(std::string(failure.what()).find("window wait_versions") != std::string::npos);
        }
      },
      quick(1500ms));
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        std::vector<float> x(comm.rank() == 2 ? 6 : 5);
        expect_error([&] { chorus::window win(comm, x); }, chorus::errc::mismatch, "rank 2 made its window of 6");
      },
      quick());
  chorus::run_threads(
      3,
      [&](communicator& comm) {  // one rank lists itself: every rank hears of it
        std::vector<float> x(5);
        const std::vector<int> sources = comm.rank() == 1 ? std::vector<int>{1} : std::vector<int>{};
        expect_error([&] { chorus::window win(comm, x, {.sources = sources}); }, chorus::errc::invalid_argument,
                     "rank 1 gave sources that are not distinct ranks");
      },
      quick());
}

TEST_CASE("the relay applies each requester's operations in order, answers loads and reads, rejects a bad op") {
  namespace win = chorus::windows;
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        using transport_type = communicator::transport_type;
        transport_type& network = comm.transport();
        const win::relay_tags tags{comm.wire_tag(chorus::tag::point_to_point, 1),
                                   comm.wire_tag(chorus::tag::point_to_point, 2),
                                   comm.wire_tag(chorus::tag::point_to_point, 3)};
        constexpr std::size_t bytes = 3 * 64 + 4099;  // [counter line of rank 1][of rank 2][unused][rank r's bytes]
        const auto pattern = [](int rank, int round) {
          std::vector<std::byte> data(2000 + static_cast<std::size_t>(rank));
          for (std::size_t k = 0; k < data.size(); ++k)
            data[k] = std::byte(static_cast<unsigned>(k * 7 + rank + round));
          return data;
        };
        const std::size_t data_at = 3 * 64;
        if (comm.rank() == 0) {
          std::vector<std::uint64_t> words((bytes + 7) / 8);
          const std::span<std::byte> memory(reinterpret_cast<std::byte*>(words.data()), bytes);
          win::relay_server<transport_type> relay(network, memory, tags, {comm.world_rank(1), comm.world_rank(2)}, 0);
          // Served until rank 1's malformed op, which comes after both flushed.
          expect_error(
              [&] {
                (void)network.progress_until([&] { return relay.serve() && false; }, comm.deadline());
                FAIL("the malformed op was not found");
              },
              chorus::errc::mismatch, "is not an operation on this window");
          CHECK(words[0] == 0);
          CHECK(words[8] == 5);   // rank 1's counter
          CHECK(words[16] == 5);  // rank 2's
          const std::vector<std::byte> last1 = pattern(1, 4), last2 = pattern(2, 4);
          CHECK(std::equal(last1.begin(), last1.end(), memory.begin() + static_cast<std::ptrdiff_t>(data_at)));
          CHECK(std::equal(last2.begin() + 1000, last2.end(),
                           memory.begin() + static_cast<std::ptrdiff_t>(data_at + 2100)));
        } else {
          const int me = comm.rank();
          win::peer_region<transport_type> owner(network, comm.world_rank(0), {}, win::reach::messages, tags);
          const std::size_t counter = 64 * static_cast<std::size_t>(me);
          const std::size_t at = data_at + (me == 1 ? 0 : 2100);
          for (int round = 0; round < 5; ++round) {
            std::vector<std::byte> data = pattern(me, round);
            if (me == 2) data.erase(data.begin(), data.begin() + 1000);
            owner.write(at, data);
            owner.increment(counter);
            CHECK(owner.load(counter, comm.deadline()) == static_cast<std::uint64_t>(round + 1));
            std::vector<std::byte> back(data.size());
            owner.read(at, back, comm.deadline());
            CHECK(back == data);
          }
          owner.flush(comm.deadline());
          if (me == 2) {
            comm.send(std::span<const int>(), 1, 9);
          } else {
            comm.recv(std::span<int>(), 2, 9);
            const win::relay_op beyond{win::relay_kind::write, 0, bytes - 8, 16};
            auto sent = network.isend(comm.world_rank(0), tags.request, std::as_bytes(std::span(&beyond, 1)));
            network.wait(sent, comm.deadline(), "test");
          }
        }
        comm.barrier();
      },
      quick());
}

namespace {

namespace avg = chorus::averaging;

// A model of awkward tensor sizes, different on every rank.
struct model {
  std::vector<std::vector<float>> tensors;
  explicit model(int rank) {
    for (std::size_t t = 0; t < sizes.size(); ++t) tensors.push_back(values_of(rank, static_cast<int>(t), sizes[t]));
  }
  avg::parameters view() {
    std::vector<std::span<float>> spans;
    for (auto& tensor : tensors) spans.emplace_back(tensor);
    return avg::parameters(spans);
  }
  std::vector<float> flat() const {
    std::vector<float> all;
    for (const auto& tensor : tensors) all.insert(all.end(), tensor.begin(), tensor.end());
    return all;
  }
};

// The mean of the n ranks' starting models, element by element.
std::vector<double> starting_mean(int n) {
  std::vector<double> mean(model(0).flat().size(), 0.0);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> x = model(r).flat();
    for (std::size_t k = 0; k < mean.size(); ++k) mean[k] += static_cast<double>(x[k]) / n;
  }
  return mean;
}

// Every element of the model one higher: a training step whose effect on
// the consensus is known.
void add_one(model& m) {
  for (auto& tensor : m.tensors)
    for (float& value : tensor) value += 1.0f;
}

// How far the model's elements lie above the starting mean, on average.
double rise_over(const model& m, const std::vector<double>& mean) {
  const std::vector<float> x = m.flat();
  double rise = 0;
  for (std::size_t k = 0; k < x.size(); ++k)
    rise += (static_cast<double>(x[k]) - mean[k]) / static_cast<double>(x.size());
  return rise;
}

}  // namespace

TEST_CASE("one-sided gossip keeps sum p = n and the p-weighted mean, and finish() reaches the mean") {
  for (int n : {3, 4, 5}) {
    CAPTURE(n);
    wrong = 0;
    const std::vector<double> mean = starting_mean(n);
    std::mutex lock;
    double weights = 0;
    std::vector<double> weighted(mean.size(), 0.0);
    chorus::run_threads(
        n,
        [&](communicator& comm) {
          model mine(comm.rank());
          avg::one_sided_gossip scheme(comm, mine.view());
          // Ranks step at different speeds: rank 0 twice as often. Every
          // rank's first push goes out (none is in quiesce() yet); later
          // ones skip the ranks that finished first.
          const int steps = comm.rank() == 0 ? 40 : 20;
          for (int step = 0; step < steps; ++step) {
            scheme.step([] {}, [] {});
            if (step == 0) comm.barrier();
            if (comm.rank() == 1) std::this_thread::sleep_for(1ms);
          }
          scheme.quiesce();
          {
            std::lock_guard guard(lock);
            weights += scheme.weight();
            const std::vector<float> x = mine.flat();
            for (std::size_t k = 0; k < x.size(); ++k) weighted[k] += scheme.weight() * x[k];
          }
          comm.barrier();
          scheme.finish();
          const std::vector<float> x = mine.flat();
          for (std::size_t k = 0; k < x.size(); ++k) expect_close(x[k], mean[k], 1e-5);
          CHECK(scheme.stats().exchanges > 0);
        },
        quick());
    CHECK(weights == doctest::Approx(n).epsilon(1e-12));
    for (std::size_t k = 0; k < mean.size(); ++k) CHECK(weighted[k] / n == doctest::Approx(mean[k]).epsilon(1e-5));
    CHECK(wrong == 0);
  }
}

TEST_CASE("one-sided gossip: ranks that step on long after their in-neighbours stopped keep their models") {
  // A directed cycle 0 -> 1 -> 2 -> 0. Ranks 0 and 1 step 2000 times while
  // rank 2 does not (nor is it in quiesce(): once its slot is full, rank 1
  // keeps the share it would push there): nothing reaches rank 0, whose
  // weight halves every step until it holds it below 1e-6. Mixing only takes convex
  // combinations, so every model stays inside the starting models' range,
  // element by element; finish() is still the mean.
  const int n = 3;
  const avg::topology cycle = avg::topology::from_weights({{0.5, 0.0, 0.5}, {0.5, 0.5, 0.0}, {0.0, 0.5, 0.5}},
                                                          avg::stochastic::column, "directed cycle");
  wrong = 0;
  std::vector<float> low(model(0).flat()), high(low);
  std::vector<double> mean(low.size(), 0.0);
  for (int r = 0; r < n; ++r) {
    const std::vector<float> x = model(r).flat();
    for (std::size_t k = 0; k < x.size(); ++k) {
      low[k] = std::min(low[k], x[k]);
      high[k] = std::max(high[k], x[k]);
      mean[k] += static_cast<double>(x[k]) / n;
    }
  }
  std::atomic<std::size_t> outside{0};
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        model mine(comm.rank());
        avg::one_sided_gossip scheme(comm, mine.view(), {.topology = cycle});
        for (int step = 0; step < 2000; ++step) {
          if (comm.rank() < 2) scheme.step([] {}, [] {});
          comm.barrier();  // in step: rank 1 merges rank 0's pushes one by one
        }
        scheme.quiesce();
        const std::vector<float> x = mine.flat();
        std::size_t count = 0;
        for (std::size_t k = 0; k < x.size(); ++k)
          count += x[k] >= low[k] - 1e-5f * std::fabs(low[k]) && x[k] <= high[k] + 1e-5f * std::fabs(high[k]) ? 0 : 1;
        outside += count;
        scheme.finish();
        const std::vector<float> final_model = mine.flat();
        for (std::size_t k = 0; k < final_model.size(); ++k) expect_close(final_model[k], mean[k], 1e-5);
      },
      quick());
  CHECK(outside == 0);
  CHECK(wrong == 0);
}

TEST_CASE("one-sided gossip: pushes skip a rank waiting in quiesce(), so the consensus holds the last models") {
  // Rank 2 goes straight to quiesce() while ranks 0 and 1 step 300 times,
  // each step adding 1 to every element. The consensus sum p x / n rises
  // by (p0 + p1) / n per step, less what is in flight between them. A rank
  // 2 that took the pushes in would hold nearly all the weight within a few
  // dozen steps, and the consensus would stop rising there (about +2); with
  // its share kept, rank 2 keeps p = 1 and the rise is up to 2/3 a step
  // (200), less the weight in flight between ranks 0 and 1 (bounded: a push
  // goes out only to a neighbour ready for it, the rest is kept). Ranks 0
  // and 1 start once rank 2's notice has had time to arrive (a push sent
  // before it would still go to rank 2, legitimately).
  const int n = 3, steps = 300;
  wrong = 0;
  const std::vector<double> mean = starting_mean(n);
  std::atomic<bool> rank2_stopped{false};
  std::barrier in_step(2);  // ranks 0 and 1 step side by side, whatever the scheduler does
  std::atomic<int> low_rise{0};
  std::vector<double> weights(n, 0.0);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        model mine(comm.rank());
        avg::one_sided_gossip scheme(comm, mine.view());
        if (comm.rank() == 2) {
          rank2_stopped = true;
        } else {
          while (!rank2_stopped) std::this_thread::yield();
          std::this_thread::sleep_for(200ms);
          for (int step = 0; step < steps; ++step) {
            scheme.step([&] { add_one(mine); }, [] {});
            in_step.arrive_and_wait();
          }
        }
        scheme.quiesce();
        weights[static_cast<std::size_t>(comm.rank())] = scheme.weight();
        scheme.finish();
        const double rise = rise_over(mine, mean);
        CAPTURE(rise);
        if (rise < steps / 10.0) ++low_rise;
      },
      quick());
  CAPTURE(weights[0]);
  CAPTURE(weights[1]);
  CHECK(weights[0] + weights[1] + weights[2] == doctest::Approx(n).epsilon(1e-12));
  CHECK(weights[2] == doctest::Approx(1.0).epsilon(1e-12));
  CHECK(low_rise == 0);
  CHECK(wrong == 0);
}

TEST_CASE("one-sided gossip keeps the share of a neighbour with no room, so what it trains meanwhile counts") {
  // Two ranks. Rank 1 neither steps nor reads until rank 0 has stepped 100
  // times, each step adding 1 to every element. Rank 0's first two pushes
  // fill its slot at rank 1, half its weight each (p: 1, 1/2, 1/4); then
  // rank 1 has no room, and rank 0 keeps its share instead of summing it
  // here for later. The consensus rise is (p0 * 100 + the pushes' p * step)
  // / 2: at least (1/4 * 100 + 1/2 * 1 + 1/4 * 2) / 2 = 13 (more where the
  // link still carried a push when the next was due). Summed pushes would
  // halve p0 every step, and the rise would be about 1.
  const int n = 2, steps = 100;
  wrong = 0;
  const std::vector<double> mean = starting_mean(n);
  std::atomic<bool> rank0_done{false};
  double weight_before_reads = 0;
  std::vector<double> rises(n, 0.0);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        model mine(comm.rank());
        avg::one_sided_gossip scheme(comm, mine.view());
        if (comm.rank() == 0) {
          for (int step = 0; step < steps; ++step) scheme.step([&] { add_one(mine); }, [] {});
          weight_before_reads = scheme.weight();
          rank0_done = true;
        } else {
          while (!rank0_done) std::this_thread::yield();
        }
        scheme.finish();
        rises[static_cast<std::size_t>(comm.rank())] = rise_over(mine, mean);
      },
      quick());
  CHECK(weight_before_reads >= 0.25);
  CHECK(rises[0] >= 13.0 - 1e-3);
  CHECK(rises[1] == doctest::Approx(rises[0]).epsilon(1e-5));
}

TEST_CASE("one-sided gossip drives the models together without finish() (steps in lockstep, so they overlap)") {
  const int n = 4;
  wrong = 0;
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        model mine(comm.rank());
        avg::one_sided_gossip scheme(comm, mine.view());
        // Rounds of 10 steps until the models are within 1e-2 (3 rounds when
        // every push lands within its step; a push behind a busy link waits
        // summed for a later one, so a loaded machine may take more).
        double distance = 1.0;
        for (int round = 0; round < 30 && distance >= 1e-2; ++round) {
          for (int step = 0; step < 10; ++step) {
            scheme.step([] {}, [] {});
            comm.barrier();  // a collective between steps: pushes never wait for it
          }
          scheme.quiesce();
          distance = avg::consensus_distance(comm, mine.view());  // the same on every rank
        }
        CAPTURE(distance);
        CHECK(distance < 1e-2);
        scheme.finish();
      },
      quick());
  CHECK(wrong == 0);
}

TEST_CASE("D-PSGD on a window equals two-sided D-PSGD bit for bit, ranks running at different speeds") {
  struct setup {
    avg::topology graph;
    const char* codec;
  };
  const std::vector<setup> setups = {{avg::topology::ring(5), "none"},
                                     {avg::topology::one_peer_exponential(6), "none"},
                                     {avg::topology::exponential(5), "fp16"},
                                     {avg::topology::ring(3), "int8"}};
  for (const setup& each : setups) {
    CAPTURE(each.graph.name());
    CAPTURE(std::string(each.codec));
    const int n = each.graph.size();
    std::vector<std::vector<float>> results[2];
    for (const bool one_sided : {false, true}) {
      results[one_sided].assign(static_cast<std::size_t>(n), {});
      std::mutex lock;
      chorus::run_threads(
          n,
          [&](communicator& comm) {
            model mine(comm.rank());
            avg::dpsgd_options options{.topology = each.graph, .one_sided = one_sided};
            if (std::string(each.codec) != "none") options.codec = chorus::codec::by_name(each.codec);
            avg::dpsgd scheme(comm, mine.view(), options);
            for (int step = 0; step < 12; ++step) {
              // A gradient step of the rank's own: x -= 0.05 (x - rank).
              scheme.step([] {},
                          [&] {
                            for (auto& tensor : mine.tensors)
                              for (float& value : tensor) value -= 0.05f * (value - static_cast<float>(comm.rank()));
                          });
              if (comm.rank() % 2 == 1) std::this_thread::sleep_for(std::chrono::microseconds(300));
            }
            std::lock_guard guard(lock);
            results[one_sided][static_cast<std::size_t>(comm.rank())] = mine.flat();
          },
          quick());
    }
    for (int r = 0; r < n; ++r)
      CHECK(results[0][static_cast<std::size_t>(r)] == results[1][static_cast<std::size_t>(r)]);
  }
}
