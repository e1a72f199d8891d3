// The NCCL layer above the NCCL calls, over the host adapter (chorus's own
// communicator standing in for NCCL) and over scripted adapters: every
// collective, type and op against serial references; the grouped plans;
// the unique-id bootstrap through the store; the bounded wait, abort and
// error mapping; host memory through UCX; the schemes on an NCCL
// communicator, compared with the same schemes on a chorus communicator
// (D-PSGD and DiLoCo with models in device memory too).
#include "collective_cases.hpp"
#include "expect_error.hpp"
#include "fake_compute.hpp"
#include "fake_nccl.hpp"
#include "support.hpp"

#include <chorus/averaging.hpp>
#include <chorus/cuda/router.hpp>
#include <chorus/nccl/nccl_compressed_allreduce.hpp>
#include <chorus/nccl/host_adapter.hpp>

#include <doctest/doctest.h>

#include <atomic>
#include <mutex>
#include <set>

using chorus::communicator;
using namespace chorus_test;
using namespace std::chrono_literals;
namespace nccl = chorus::nccl;

namespace {

std::shared_ptr<nccl::adapter> host_nccl() { return std::make_shared<nccl::host_adapter>(); }

std::size_t wrong_total(std::atomic<std::size_t>& wrong) { return wrong.load(); }

// allreduce in place and out of place, with op, for one type at one count.
template <class T, class Op>
std::size_t allreduce_case(nccl::communicator& gpus, std::size_t count, std::uint64_t seed) {
  const flavour kind = std::is_same_v<Op, chorus::op::prod> ? flavour::product : flavour::general;
  const auto expected = reference<T>(all_ranks(gpus.size()), count, seed, kind, Op{});
  std::vector<T> data = inputs<T>(gpus.rank(), count, seed, kind);
  std::size_t wrong = chorus::allreduce(gpus, std::span(data), Op{}) != chorus::algo::nccl;
  wrong += count_different(data, expected);
  const std::vector<T> input = inputs<T>(gpus.rank(), count, seed, kind);
  std::vector<T> output(count);
  wrong += chorus::allreduce(gpus, std::span(input), std::span(output), Op{}) != chorus::algo::nccl;
  wrong += count_different(output, expected);
  return wrong;
}

template <class T>
std::size_t every_op(nccl::communicator& gpus, std::size_t count) {
  // Products of unsigned inputs wrap, which the exact reference does not model.
  const std::size_t products = std::is_unsigned_v<T> ? 0 : allreduce_case<T, chorus::op::prod>(gpus, count, 2);
  return products + allreduce_case<T, chorus::op::sum>(gpus, count, 1) +
         allreduce_case<T, chorus::op::min>(gpus, count, 3) + allreduce_case<T, chorus::op::max>(gpus, count, 4) +
         allreduce_case<T, chorus::op::avg>(gpus, count, 5);
}

// reduce to the last rank, broadcast from it, reduce_scatter and allgather.
template <class T>
std::size_t rooted_and_blocked(nccl::communicator& gpus, std::size_t block) {
  const int n = gpus.size(), me = gpus.rank(), root = n - 1;
  const auto un = static_cast<std::size_t>(n);
  std::size_t wrong = 0;
  const std::vector<T> mine = inputs<T>(me, block * un, 7, flavour::general);
  const auto summed = reference<T>(all_ranks(n), block * un, 7, flavour::general, chorus::op::sum{});

  std::vector<T> reduced(me == root ? block * un : 0);
  wrong += chorus::reduce(gpus, std::span(mine), std::span(reduced), root, chorus::op::sum{}) != chorus::algo::nccl;
  if (me == root) wrong += count_different(reduced, summed);

  std::vector<T> shared = me == root ? summed : std::vector<T>(block * un);
  wrong += chorus::broadcast(gpus, std::span(shared), root) != chorus::algo::nccl;
  wrong += count_different(shared, summed);

  std::vector<T> part(block);
  wrong += chorus::reduce_scatter(gpus, std::span(mine), std::span(part), chorus::op::sum{}) != chorus::algo::nccl;
  wrong += count_different(
      part, std::vector<T>(summed.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(me)),
                           summed.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(me + 1))));

  // Every rank's block, gathered: out of place, then in place.
  std::vector<T> everyone;
  for (int r = 0; r < n; ++r) {
    const auto theirs = inputs<T>(r, block, 11, flavour::general);
    everyone.insert(everyone.end(), theirs.begin(), theirs.end());
  }
  const std::vector<T> own = inputs<T>(me, block, 11, flavour::general);
  std::vector<T> gathered(block * un);
  wrong += chorus::allgather(gpus, std::span(own), std::span(gathered)) != chorus::algo::nccl;
  wrong += count_different(gathered, everyone);
  std::vector<T> in_place(block * un);
  std::copy(own.begin(), own.end(),
            in_place.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(me)));
  wrong += chorus::allgather(gpus, std::span(in_place)) != chorus::algo::nccl;
  wrong += count_different(in_place, everyone);
  // NCCL's in-place forms (FSDP2's): the input is this rank's block of the
  // allgather's output; the reduce_scatter's output its block of the input.
  const std::size_t own_at = block * static_cast<std::size_t>(me);
  std::vector<T> chunked(block * un);
  std::copy(own.begin(), own.end(), chunked.begin() + static_cast<std::ptrdiff_t>(own_at));
  wrong += chorus::allgather(gpus, std::span<const T>(chunked).subspan(own_at, block), std::span(chunked)) !=
           chorus::algo::nccl;
  wrong += count_different(chunked, everyone);
  std::vector<T> scattered = mine;
  wrong += chorus::reduce_scatter(gpus, std::span<const T>(scattered), std::span(scattered).subspan(own_at, block),
                                  chorus::op::sum{}) != chorus::algo::nccl;
  wrong += count_different(std::vector<T>(scattered.begin() + static_cast<std::ptrdiff_t>(own_at),
                                          scattered.begin() + static_cast<std::ptrdiff_t>(own_at + block)),
                           std::vector<T>(summed.begin() + static_cast<std::ptrdiff_t>(own_at),
                                          summed.begin() + static_cast<std::ptrdiff_t>(own_at + block)));
  return wrong;
}

// alltoall, gather and scatter through their grouped plans, and send/recv
// around the ring, with values that name sender, receiver and position.
std::size_t grouped(nccl::communicator& gpus, std::size_t block) {
  const int n = gpus.size(), me = gpus.rank();
  const auto un = static_cast<std::size_t>(n);
  std::size_t wrong = 0;
  std::vector<std::uint32_t> out, expected;
  for (int to = 0; to < n; ++to) {
    const auto piece = patterned(me, to, 0, block);
    out.insert(out.end(), piece.begin(), piece.end());
    const auto theirs = patterned(to, me, 0, block);
    expected.insert(expected.end(), theirs.begin(), theirs.end());
  }
  std::vector<std::uint32_t> in(block * un);
  wrong += chorus::alltoall(gpus, std::span<const std::uint32_t>(out), std::span(in)) != chorus::algo::nccl;
  wrong += count_different(in, expected);

  // Wrong elements of a gather to `root`: block r from rank r.
  const auto wrong_gathered = [&](const std::vector<std::uint32_t>& all, int root) {
    std::size_t bad = 0;
    for (int r = 0; r < n; ++r) {
      const auto first = all.begin() + static_cast<std::ptrdiff_t>(block * static_cast<std::size_t>(r));
      bad += count_wrong(std::vector<std::uint32_t>(first, first + static_cast<std::ptrdiff_t>(block)), r, root, 1);
    }
    return bad;
  };
  for (int root : {0, n - 1}) {
    const auto mine = patterned(me, root, 1, block);
    std::vector<std::uint32_t> all(me == root ? block * un : 0);
    chorus::gather(gpus, std::span(mine), std::span(all), root);
    if (me == root) wrong += wrong_gathered(all, root);
    std::vector<std::uint32_t> source;
    if (me == root)
      for (int r = 0; r < n; ++r) {
        const auto piece = patterned(root, r, 2, block);
        source.insert(source.end(), piece.begin(), piece.end());
      }
    std::vector<std::uint32_t> received(block);
    chorus::scatter(gpus, std::span<const std::uint32_t>(source), std::span(received), root);
    wrong += count_wrong(received, root, me, 2);

    // In place at the root: its block of `all` is its own part.
    const std::size_t root_at = block * static_cast<std::size_t>(root);
    std::vector<std::uint32_t> whole = me == root ? std::vector<std::uint32_t>(block * un) : mine;
    if (me == root) std::copy(mine.begin(), mine.end(), whole.begin() + static_cast<std::ptrdiff_t>(root_at));
    const std::size_t at = me == root ? root_at : 0;
    chorus::gather(gpus, std::span<const std::uint32_t>(whole).subspan(at, block), std::span(whole), root);
    if (me == root) wrong += wrong_gathered(whole, root);
    std::vector<std::uint32_t> spread = me == root ? source : std::vector<std::uint32_t>(block);
    const std::span<std::uint32_t> part = std::span(spread).subspan(at, block);
    chorus::scatter(gpus, std::span<const std::uint32_t>(spread), part, root);
    wrong += count_wrong(std::vector<std::uint32_t>(part.begin(), part.end()), root, me, 2);
  }

  // Send right, receive from the left: the even ranks first, so that
  // plain (ungrouped) sends cannot all wait on each other.
  const int right = (me + 1) % n, left = (me + n - 1) % n;
  const auto message = patterned(me, right, 3, block);
  std::vector<std::uint32_t> got(block);
  if (n > 1) {
    if (me % 2 == 0) {
      nccl::send(gpus, std::span(message), right);
      nccl::recv(gpus, std::span(got), left);
    } else {
      nccl::recv(gpus, std::span(got), left);
      nccl::send(gpus, std::span(message), right);
    }
    wrong += count_wrong(got, left, me, 3);
  }
  return wrong;
}

}  // namespace

TEST_CASE("nccl front doors over the host adapter: every collective, NCCL type and op against serial references") {
  for (int n : {1, 2, 3, 5}) {
    CAPTURE(n);
    std::atomic<std::size_t> wrong{0};
    chorus::run_threads(
        n,
        [&](communicator& comm) {
          nccl::communicator gpus(comm, host_nccl());
          CHECK(gpus.valid());
          for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{1001}}) {
            wrong += every_op<std::int8_t>(gpus, count) + every_op<std::uint8_t>(gpus, count) +
                     every_op<std::int32_t>(gpus, count) + every_op<std::uint32_t>(gpus, count) +
                     every_op<std::int64_t>(gpus, count) + every_op<std::uint64_t>(gpus, count) +
                     every_op<chorus::half>(gpus, count) + every_op<chorus::bfloat16>(gpus, count) +
                     every_op<float>(gpus, count) + every_op<double>(gpus, count);
          }
          for (std::size_t block : {std::size_t{0}, std::size_t{1}, std::size_t{13}, std::size_t{3001}}) {
            wrong += rooted_and_blocked<float>(gpus, block) + rooted_and_blocked<std::int64_t>(gpus, block) +
                     rooted_and_blocked<chorus::bfloat16>(gpus, block);
            wrong += grouped(gpus, block);
          }
        },
        quick());
    CHECK(wrong_total(wrong) == 0);
  }
}

TEST_CASE("nccl plans: alltoall, gather and scatter post each block once, to the right peer") {
  const auto alltoall = nccl::alltoall_plan(3, 5);
  REQUIRE(alltoall.size() == 6);
  for (int p = 0; p < 3; ++p) {
    const auto& out = alltoall[static_cast<std::size_t>(2 * p)];
    const auto& in = alltoall[static_cast<std::size_t>(2 * p + 1)];
    CHECK((out.sending && !in.sending));
    CHECK((out.peer == p && in.peer == p));
    CHECK((out.offset == static_cast<std::size_t>(5 * p) && in.offset == static_cast<std::size_t>(5 * p)));
    CHECK((out.count == 5 && in.count == 5));
  }
  const auto at_root = nccl::gather_plan(4, 2, 2, 3);
  CHECK(at_root.size() == 5);  // one send (to itself), four receives
  CHECK((at_root[0].sending && at_root[0].peer == 2 && at_root[0].offset == 0));
  for (int p = 0; p < 4; ++p)
    CHECK((!at_root[static_cast<std::size_t>(p + 1)].sending &&
           at_root[static_cast<std::size_t>(p + 1)].offset == static_cast<std::size_t>(3 * p)));
  const auto elsewhere = nccl::gather_plan(4, 1, 2, 3);
  CHECK((elsewhere.size() == 1 && elsewhere[0].sending && elsewhere[0].peer == 2));
  const auto from_root = nccl::scatter_plan(4, 0, 0, 3);
  CHECK(from_root.size() == 5);
  CHECK((!from_root.back().sending && from_root.back().peer == 0));
  const auto receiver = nccl::scatter_plan(4, 3, 0, 3);
  CHECK((receiver.size() == 1 && !receiver[0].sending && receiver[0].peer == 0));
  // In place at the root: nothing to or from itself.
  const auto gathered_in_place = nccl::gather_plan(4, 2, 2, 3, true);
  CHECK(gathered_in_place.size() == 3);
  for (const auto& t : gathered_in_place) CHECK((!t.sending && t.peer != 2));
  const auto scattered_in_place = nccl::scatter_plan(4, 0, 0, 3, true);
  CHECK(scattered_in_place.size() == 3);
  for (const auto& t : scattered_in_place) CHECK((t.sending && t.peer != 0));
  CHECK(nccl::gather_plan(4, 1, 2, 3, true).size() == 1);  // only the root's own block is in place
  CHECK(nccl::scatter_plan(4, 3, 0, 3, true).size() == 1);
}

TEST_CASE("nccl: split, host memory through UCX, and bad calls") {
  std::atomic<std::size_t> wrong{0};
  chorus::run_threads(
      5,
      [&](communicator& comm) {
        // "Device" memory is what lives in this set; the rest is host memory,
        // which must go through the chorus communicator, as NCCL leaves it.
        std::vector<float> device_like(6, static_cast<float>(comm.rank()));
        const auto adapter = std::make_shared<nccl::host_adapter>(
            nccl::host_adapter_options{.moves = [&](const void* p) { return p == device_like.data(); }});
        nccl::communicator gpus(comm, adapter);
        const auto ran = chorus::allreduce(gpus, std::span(device_like));
        wrong += ran != chorus::algo::nccl;
        wrong += device_like[0] != 10.0f;  // 0 + 1 + 2 + 3 + 4
        // Recorded on its chorus communicator, as NCCL's (record/call.hpp).
        const chorus::record::entry recorded = gpus.host().recorder().on->snapshot().back();
        wrong += recorded.call.name.view() != "allreduce" || recorded.where != chorus::record::path::nccl ||
                 recorded.algorithm.view() != "nccl" || recorded.call.count != 6 ||
                 recorded.status != chorus::record::state::completed;
        std::vector<float> host(6, 1.0f);
        wrong += chorus::allreduce(gpus, std::span(host)) == chorus::algo::nccl;  // one of chorus's algorithms
        wrong += host[5] != 5.0f;
        std::vector<float> other(6);
        expect_error([&] { chorus::allreduce(gpus, std::span<const float>(device_like), std::span(other)); },
                     chorus::errc::invalid_argument, "device memory and some are not");
        expect_error([&] { chorus::allreduce(gpus, std::span(device_like), chorus::algo::ring); },
                     chorus::errc::invalid_argument, "runs nccl's own algorithms");
        expect_error([&] { chorus::allreduce(gpus, std::span(device_like), [](float a, float b) { return a + b; }); },
                     chorus::errc::invalid_argument, "sum, prod, min, max and avg here, not user");
        expect_error([&] { chorus::allreduce(gpus, std::span(device_like), chorus::op::premul_sum{0.5}); },
                     chorus::errc::invalid_argument, "not premul_sum (multiply on the device, then sum");
        std::vector<std::int16_t> shorts(3);
        expect_error([&] { chorus::broadcast(gpus, std::span(device_like), 5); }, chorus::errc::invalid_argument,
                     "root 5");

        // Split: evens and odds, ordered by descending rank.
        nccl::communicator half = gpus.split(comm.rank() % 2, -comm.rank());
        wrong += half.size() != (comm.rank() % 2 == 0 ? 3 : 2);
        wrong += half.rank() != (comm.rank() % 2 == 0 ? (4 - comm.rank()) / 2 : (3 - comm.rank()) / 2);
        std::vector<float> mine(3, static_cast<float>(comm.rank()));
        nccl::communicator all_nccl(comm, std::make_shared<nccl::host_adapter>());
        nccl::communicator halves = all_nccl.split(comm.rank() % 2, comm.rank());
        chorus::allreduce(halves, std::span(mine));
        wrong += mine[2] != (comm.rank() % 2 == 0 ? 6.0f : 4.0f);
        expect_error([&] { chorus::allreduce(halves, std::span(shorts)); }, chorus::errc::invalid_argument,
                     "NCCL has no int16");
        nccl::communicator none = all_nccl.split(comm.rank() == 0 ? -1 : 0, 0);
        wrong += none.valid() == (comm.rank() == 0);
      },
      quick());
  CHECK(wrong.load() == 0);
}

namespace {

// An adapter whose endpoints are scripted: for the bootstrap, the wait,
// abort and the error mapping.
struct script {
  std::atomic<int> ids_made{0};
  bool fail_id = false;
  bool stall_connect = false;  // check() stays in progress
  bool stream_never_idle = false;
  nccl::health after_call{};  // what check() says after the first call
  std::atomic<int> aborts{0};
  std::atomic<int> finalizes{0};
  std::mutex mutex;
  std::set<std::string> ids_seen;
};

class scripted_endpoint final : public nccl::endpoint {
 public:
  explicit scripted_endpoint(script& s) : s_(s) {}
  void all_reduce(const void*, void*, std::size_t, chorus::dtype, nccl::reduction, nccl::stream_handle) override {
    called_ = true;
  }
  void broadcast(const void*, void*, std::size_t, chorus::dtype, int, nccl::stream_handle) override { called_ = true; }
  void reduce(const void*, void*, std::size_t, chorus::dtype, nccl::reduction, int, nccl::stream_handle) override {}
  void all_gather(const void*, void*, std::size_t, chorus::dtype, nccl::stream_handle) override {}
  void reduce_scatter(const void*, void*, std::size_t, chorus::dtype, nccl::reduction, nccl::stream_handle) override {}
  void send(const void*, std::size_t, chorus::dtype, int, nccl::stream_handle) override {}
  void recv(void*, std::size_t, chorus::dtype, int, nccl::stream_handle) override {}
  void group_start() override {}
  void group_end() override {}
  nccl::health check() override {
    if (s_.stall_connect) return {nccl::result::in_progress, {}, chorus::errc::transport};
    return called_ ? s_.after_call : nccl::health{};
  }
  bool stream_idle(nccl::stream_handle) override { return !s_.stream_never_idle; }
  void finalize() override { ++s_.finalizes; }
  void abort() noexcept override { ++s_.aborts; }

 private:
  script& s_;
  bool called_ = false;
};

class scripted_adapter final : public nccl::adapter {
 public:
  explicit scripted_adapter(script& s) : s_(s) {}
  std::string name() const override { return "scripted"; }
  int devices() override { return 2; }
  nccl::unique_id new_id() override {
    ++s_.ids_made;
    if (s_.fail_id) throw chorus::error(chorus::errc::unavailable, "ncclGetUniqueId failed: scripted");
    nccl::unique_id id{};
    id[0] = std::byte{42};
    id[127] = static_cast<std::byte>(s_.ids_made.load());
    return id;
  }
  std::unique_ptr<nccl::endpoint> connect(communicator&, const nccl::unique_id& id, int device) override {
    std::lock_guard lock(s_.mutex);
    s_.ids_seen.insert(nccl::detail::to_hex(id) + "/" + std::to_string(device >= 0));
    return std::make_unique<scripted_endpoint>(s_);
  }
  bool moves(const void*) const noexcept override { return true; }

 private:
  script& s_;
};

}  // namespace

TEST_CASE("nccl bootstrap: rank 0's unique id reaches every rank through the store") {
  script s;
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        nccl::communicator gpus(comm, std::make_shared<scripted_adapter>(s));
        CHECK(gpus.device() == comm.rank() % 2);  // the rank (no CHORUS_LOCAL_RANK) modulo 2 devices
      },
      quick());
  CHECK(s.ids_made.load() == 1);
  CHECK(s.ids_seen.size() == 1);   // one id, seen by all three
  CHECK(s.finalizes.load() == 3);  // closed cleanly: finalized, never aborted
  CHECK(s.aborts.load() == 0);

  // Rank 0 cannot make an id: every rank fails at once, naming the cause.
  script failing;
  failing.fail_id = true;
  std::atomic<int> failed{0};
  const auto start = std::chrono::steady_clock::now();
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        expect_error([&] { nccl::communicator gpus(comm, std::make_shared<scripted_adapter>(failing)); },
                     chorus::errc::unavailable, "scripted");
        ++failed;
      },
      quick());
  CHECK(failed.load() == 3);
  CHECK(std::chrono::steady_clock::now() - start < 30s);  // not the 60 s timeout: no one waited it out

  // The host adapter catches ranks that were given different ids.
  chorus::run_threads(
      2,
      [&](communicator& comm) {
        nccl::host_adapter adapter;
        communicator own = comm.split(0, comm.rank());
        nccl::unique_id id{};
        id[3] = static_cast<std::byte>(comm.rank());
        expect_error([&] { adapter.connect(own, id, 0); }, chorus::errc::mismatch, "different NCCL unique ids");
      },
      quick());
}

TEST_CASE("nccl waits are bounded: a hang or an asynchronous error aborts and becomes a chorus::error") {
  std::vector<float> data(4);
  nccl::options quickly;
  quickly.timeout = 300ms;
  SUBCASE("a communicator whose ranks never all join") {
    script s;
    s.stall_connect = true;
    chorus::run_threads(
        2,
        [&](communicator& comm) {
          expect_error([&] { nccl::communicator gpus(comm, std::make_shared<scripted_adapter>(s), quickly); },
                       chorus::errc::timeout, "300 ms");
        },
        quick());
    CHECK(s.aborts.load() == 2);
  }
  SUBCASE("a kernel that never finishes") {
    script s;
    s.stream_never_idle = true;
    chorus::run_threads(
        2,
        [&](communicator& comm) {
          nccl::communicator gpus(comm, std::make_shared<scripted_adapter>(s), quickly);
          const auto start = std::chrono::steady_clock::now();
          expect_error([&] { chorus::allreduce(gpus, std::span(data)); }, chorus::errc::timeout, "was aborted");
          CHECK(std::chrono::steady_clock::now() - start < 10s);
          expect_error([&] { chorus::allreduce(gpus, std::span(data)); }, chorus::errc::invalid_argument,
                       "make a new one");
          // Unsynchronised calls return once enqueued; wait() is bounded too.
        },
        quick());
    CHECK(s.aborts.load() == 2);
    CHECK(s.finalizes.load() == 0);  // an aborted communicator is not finalized
    script t;
    t.stream_never_idle = true;
    chorus::run_threads(
        1,
        [&](communicator& comm) {
          nccl::options later;
          later.timeout = 200ms;
          later.synchronous = false;
          nccl::communicator gpus(comm, std::make_shared<scripted_adapter>(t), later);
          chorus::allreduce(gpus, std::span(data));  // enqueued: returns
          expect_error([&] { gpus.wait(nullptr); }, chorus::errc::timeout, "200 ms");
        },
        quick());
  }
  SUBCASE("NCCL's asynchronous errors, by category") {
    const std::pair<nccl::result, chorus::errc> cases[] = {
        {nccl::result::remote_error, chorus::errc::peer_failure},
        {nccl::result::system_error, chorus::errc::peer_failure},
        {nccl::result::invalid_usage, chorus::errc::invalid_argument},
        {nccl::result::internal_error, chorus::errc::transport},
        {nccl::result::unhandled_cuda_error, chorus::errc::unavailable},
    };
    for (const auto& [state, category] : cases) {
      CHECK(nccl::category_of(state) == category);
      script s;
      s.after_call = {state, "peer 1 hung up", nccl::category_of(state)};
      chorus::run_threads(
          1,
          [&](communicator& comm) {
            nccl::communicator gpus(comm, std::make_shared<scripted_adapter>(s));
            expect_error([&] { chorus::broadcast(gpus, std::span(data), 0); }, category,
                         std::string(nccl::to_string(state)) + ": peer 1 hung up");
          },
          quick());
      CHECK(s.aborts.load() == 1);
    }
  }
}

TEST_CASE("nccl over the host adapter: a peer that never comes is a chorus::error on every survivor") {
  std::atomic<int> errors{0};
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        nccl::communicator gpus(comm, host_nccl());
        std::vector<double> data(1000, 1.0);
        if (comm.rank() == 2) return;  // never calls the allreduce
        try {
          chorus::allreduce(gpus, std::span(data));
        } catch (const chorus::error& failure) {
          CAPTURE(failure.what());
          CHECK((failure.category() == chorus::errc::timeout || failure.category() == chorus::errc::peer_failure));
          ++errors;
        }
      },
      quick(1500ms));
  CHECK(errors.load() == 2);
}

TEST_CASE("schemes run unchanged on an NCCL communicator: the same models as on the chorus communicator") {
  constexpr std::size_t size = 257;
  const auto gradient = [](int rank, int step, std::size_t k) {
    return static_cast<float>(((rank + 1) * 7 + step * 3 + static_cast<int>(k % 13)) % 17 - 8) / 16.0f;
  };
  // Trains a linear "model" for 6 steps with scheme S over communicator C.
  const auto train = [&](auto make_scheme, auto& over, int rank) {
    std::vector<float> weights(size), grads(size);
    for (std::size_t k = 0; k < size; ++k) weights[k] = static_cast<float>(rank) + static_cast<float>(k) / 64.0f;
    auto scheme = make_scheme(over, std::span(weights), std::span(grads));
    for (int step = 0; step < 6; ++step) {
      scheme.step(
          [&] {
            for (std::size_t k = 0; k < size; ++k) grads[k] = gradient(rank, step, k);
          },
          [&] {
            for (std::size_t k = 0; k < size; ++k) weights[k] -= 0.5f * grads[k];
          });
    }
    scheme.finish();
    return weights;
  };
  const auto local = [](auto& c, std::span<float> w, std::span<float>) {
    return chorus::averaging::local_sgd(c, chorus::averaging::parameters(w), {.period = 2});
  };
  const auto sgd = [](auto& c, std::span<float> w, std::span<float> g) {
    return chorus::averaging::allreduce_sgd(c, chorus::averaging::parameters(w), chorus::averaging::parameters(g));
  };
  const auto elastic = [](auto& c, std::span<float> w, std::span<float>) {
    return chorus::averaging::easgd(c, chorus::averaging::parameters(w), {.alpha = 0.25, .tau = 2});
  };
  // D-PSGD: each round's sends and receives are one NCCL group.
  const auto decentralised = [](auto& c, std::span<float> w, std::span<float>) {
    return chorus::averaging::dpsgd(c, chorus::averaging::parameters(w),
                                    {.topology = chorus::averaging::topology::ring(c.size())});
  };
  std::atomic<std::size_t> wrong{0};
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        nccl::communicator gpus(comm, host_nccl());
        wrong += count_different(train(decentralised, gpus, comm.rank()), train(decentralised, comm, comm.rank()));
        wrong += count_different(train(local, gpus, comm.rank()), train(local, comm, comm.rank()));
        wrong += count_different(train(sgd, gpus, comm.rank()), train(sgd, comm, comm.rank()));
        wrong += count_different(train(elastic, gpus, comm.rank()), train(elastic, comm, comm.rank()));
      },
      quick());
  CHECK(wrong.load() == 0);
}

namespace {

// The serial reference of the NCCL compressed allreduce: every rank's
// contribution, prescaled and encoded once by the CPU codec (through error
// feedback's residual where `feedback` has one per rank), decoded and added
// in rank order, then unscaled (and averaged).
template <class Coder>
std::vector<float> compressed_reference(std::vector<Coder>& per_rank, std::size_t count, float scale, bool average,
                                        std::uint64_t seed) {
  using access = chorus::codec::codec_of<Coder>;
  const auto& c = access::get(per_rank[0]);
  std::vector<float> sum(count, 0.0f), scaled(count);
  std::vector<std::byte> encoded(c.encoded_bytes(count));
  for (std::size_t r = 0; r < per_rank.size(); ++r) {
    const auto x = inputs<float>(static_cast<int>(r), count, seed, flavour::general);
    chorus::compressed::scale_into(std::span<const float>(x), std::span(scaled), scale);
    access::encode(per_rank[r], std::span<const float>(scaled), std::span(encoded), 0, 0, count);
    c.decode_add(encoded, sum);
  }
  chorus::compressed::unscale(std::span(sum), scale);
  if (average)
    for (float& v : sum) v /= static_cast<float>(per_rank.size());
  return sum;
}

// Each rank runs the compressed allreduce `calls` times (error feedback
// carries its residual from one to the next) on buffers from `make`; the
// results must equal the serial reference bit for bit.
template <class Coder, class Buffers>
std::size_t compressed_case(nccl::communicator& gpus, Coder coder, std::size_t count, int calls, Buffers& buffers,
                            std::vector<Coder>& reference_coders, std::mutex& serial) {
  std::size_t wrong = 0;
  for (int call = 0; call < calls; ++call) {
    const auto seed = static_cast<std::uint64_t>(100 + call);
    std::span<float> data = buffers.load(inputs<float>(gpus.rank(), count, seed, flavour::general));
    wrong += chorus::allreduce(gpus, data, chorus::op::avg{}, coder) != chorus::algo::nccl;
    const std::vector<float> got = buffers.result();
    using plain = typename chorus::codec::codec_of<Coder>::type;
    const float scale = chorus::compressed::prescale_for<plain>(gpus.size(), {});
    std::vector<float> expected;
    {
      std::lock_guard lock(serial);  // rank 0 advances the shared reference residuals once per call
      if (gpus.rank() == 0) buffers.expected = compressed_reference(reference_coders, count, scale, true, seed);
    }
    chorus::barrier(gpus);
    {
      std::lock_guard lock(serial);
      expected = buffers.expected;
    }
    wrong += count_different(got, expected);
    chorus::barrier(gpus);
  }
  return wrong;
}

struct host_buffers {
  std::vector<float> values;
  std::vector<float>& expected;
  std::span<float> load(std::vector<float> x) {
    values = std::move(x);
    return values;
  }
  std::vector<float> result() const { return values; }
};

struct device_buffers {
  fake_device& fake;
  std::vector<float>& expected;
  float* device = nullptr;
  std::size_t count = 0;
  ~device_buffers() {
    if (device != nullptr) fake.free_device(device);
  }
  std::span<float> load(std::vector<float> x) {
    if (device == nullptr) {
      count = x.size();
      device = static_cast<float*>(fake.allocate_device(std::max<std::size_t>(count, 1) * sizeof(float)));
    }
    fake.write(device, std::span<const float>(x));
    return {device, count};
  }
  std::vector<float> result() { return fake.read(device, count); }
};

}  // namespace

namespace {

// A fake device with its kernels, routed through the front doors, and
// "NCCL" over its memory (fake_nccl.hpp).
struct fake_gpu_with_nccl {
  fake_device fake;
  chorus::cuda::device gpu{fake};
  chorus_test::fake_compute kernels{fake};
  chorus::cuda::router router{gpu, {4096, 3}, &kernels, chorus::cuda::path_setting::automatic};
  chorus::cuda::route_front_doors routing{router};
  std::shared_ptr<nccl::host_adapter> nccl = chorus_test::nccl_on(fake);
};

}  // namespace

TEST_CASE("nccl compressed allreduce: encoded once, allgathered, decoded in rank order; host and device memory") {
  fake_gpu_with_nccl gpu_setup;
  fake_device& fake = gpu_setup.fake;
  chorus_test::fake_compute& kernels = gpu_setup.kernels;
  const auto& nccl_on_fake = gpu_setup.nccl;

  for (int n : {1, 2, 3, 5}) {
    for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{5003}}) {
      CAPTURE(n);
      CAPTURE(count);
      std::atomic<std::size_t> wrong{0};
      std::mutex serial;
      std::vector<float> expected;
      auto references = [&](auto coder) { return std::vector<decltype(coder)>(static_cast<std::size_t>(n), coder); };
      auto fp16_refs = references(chorus::codec::fp16{});
      auto int8_refs = references(chorus::codec::int8{64});
      auto onebit_refs = references(chorus::codec::onebit{72});
      using feedback = chorus::codec::error_feedback<chorus::codec::int8>;
      std::vector<feedback> host_feedback_refs(static_cast<std::size_t>(n), feedback{chorus::codec::int8{64}});
      std::vector<feedback> device_feedback_refs(static_cast<std::size_t>(n), feedback{chorus::codec::int8{64}});
      const int launches_before = kernels.codec_launches.load();
      chorus::run_threads(
          n,
          [&](communicator& comm) {
            // Host memory, every buffer through the host adapter.
            nccl::communicator host_side(comm, host_nccl());
            host_buffers on_host{{}, expected};
            wrong += compressed_case(host_side, chorus::codec::fp16{}, count, 1, on_host, fp16_refs, serial);
            wrong += compressed_case(host_side, chorus::codec::onebit{72}, count, 1, on_host, onebit_refs, serial);
            wrong += compressed_case(host_side, feedback{chorus::codec::int8{64}}, count, 2, on_host,
                                     host_feedback_refs, serial);
            // Device memory on the fake device, which the host cannot touch:
            // the device kernels encode and decode, the adapter moves bytes.
            nccl::communicator device_side(comm, nccl_on_fake);
            device_buffers on_device{fake, expected};
            wrong += compressed_case(device_side, chorus::codec::int8{64}, count, 1, on_device, int8_refs, serial);
            wrong += compressed_case(device_side, chorus::codec::fp16{}, count, 1, on_device, fp16_refs, serial);
            wrong += compressed_case(device_side, feedback{chorus::codec::int8{64}}, count, 2, on_device,
                                     device_feedback_refs, serial);
            // Plain collectives on device memory too: NCCL's, never the host's.
            auto x = inputs<float>(comm.rank(), count, 9, flavour::general);
            std::span<float> d = on_device.load(x);
            wrong += chorus::allreduce(device_side, d) != chorus::algo::nccl;
            wrong += count_different(on_device.result(),
                                     reference<float>(all_ranks(n), count, 9, flavour::general, chorus::op::sum{}));
          },
          quick());
      CHECK(wrong.load() == 0);
      CHECK(kernels.codec_launches.load() > launches_before);  // the device path ran its kernels
    }
  }
}

TEST_CASE("nccl point-to-point: queued sends and receives go as one group at the wait; host memory through UCX") {
  for (int n : {2, 3, 5}) {
    CAPTURE(n);
    std::atomic<std::size_t> wrong{0};
    chorus::run_threads(
        n,
        [&](communicator& comm) {
          std::vector<std::uint32_t> device_out, device_in;  // what the adapter moves
          const auto adapter = std::make_shared<nccl::host_adapter>(nccl::host_adapter_options{
              .moves = [&](const void* p) { return p == device_out.data() || p == device_in.data(); }});
          nccl::communicator gpus(comm, adapter);
          const int me = gpus.rank(), right = (me + 1) % n, left = (me + n - 1) % n;
          for (std::size_t count : {std::size_t{1}, std::size_t{7}, std::size_t{40009}}) {
            // Everyone sends right and receives from the left, all posted before
            // any wait: as plain (ungrouped) NCCL calls this would deadlock.
            device_out = patterned(me, right, 5, count);
            device_in.assign(count, 0);
            const std::vector<std::uint32_t> host_out = patterned(me, left, 6, count);
            std::vector<std::uint32_t> host_in(count);
            std::vector<nccl::communicator::request> requests;
            requests.push_back(gpus.isend(std::span<const std::uint32_t>(device_out), right, 3));
            requests.push_back(gpus.irecv(std::span(device_in), left, 3));
            requests.push_back(gpus.isend(std::span<const std::uint32_t>(host_out), left, 4));  // UCX
            requests.push_back(gpus.irecv(std::span(host_in), right, 4));
            gpus.wait_all(std::span(requests));
            gpus.expect_bytes(requests[1], count * 4, "recv");
            gpus.expect_bytes(requests[3], count * 4, "recv");
            wrong += count_wrong(device_in, left, me, 5);
            wrong += count_wrong(host_in, right, me, 6);
          }
        },
        quick());
    CHECK(wrong.load() == 0);
  }
}

TEST_CASE("asynchronous schemes on an NCCL communicator keep their messages on its chorus communicator") {
  std::atomic<std::size_t> wrong{0};
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        nccl::communicator gpus(comm, host_nccl());
        std::vector<float> gossiped(101, static_cast<float>(comm.rank())),
            elastic(101, static_cast<float>(comm.rank()));
        chorus::averaging::gosgd gossip(gpus, chorus::averaging::parameters(std::span(gossiped)),
                                        {.push_probability = 1.0});
        static_assert(std::is_same_v<decltype(gossip), chorus::averaging::gosgd<communicator>>);
        chorus::averaging::easgd_async centre(gpus, chorus::averaging::parameters(std::span(elastic)),
                                              {.alpha = 0.5, .tau = 1});
        static_assert(std::is_same_v<decltype(centre), chorus::averaging::easgd_async<communicator>>);
        for (int step = 0; step < 5; ++step) {
          gossip.step([] {}, [] {});
          centre.step([] {}, [] {});
        }
        gossip.finish();
        centre.finish();
        // No gradients: gossip's consensus is the mean of the starting models
        // (0, 1, 2), and every rank ends with the same model either way.
        std::vector<float> gossip_all(303), elastic_all(303);
        chorus::allgather(comm, std::span<const float>(gossiped), std::span(gossip_all));
        chorus::allgather(comm, std::span<const float>(elastic), std::span(elastic_all));
        for (std::size_t k = 0; k < 303; ++k) {
          wrong += std::abs(gossip_all[k] - 1.0f) > 1e-5f;
          wrong += elastic_all[k] != elastic_all[k % 101];
        }
      },
      quick());
  CHECK(wrong.load() == 0);
}

namespace {

// A model of three tensors, one empty, for the schemes with a device model:
// rank r's start and the update it applies at a step.
constexpr std::size_t model_sizes[] = {5, 0, 1003};
constexpr std::size_t model_total = 1008;

float start_value(int rank, std::size_t k) {
  return static_cast<float>((rank * 31 + static_cast<int>(k) * 7) % 23) * 0.37f - 3.0f;
}

std::vector<float> update_of(int rank, int step) {
  std::vector<float> update(model_total);
  for (std::size_t k = 0; k < model_total; ++k)
    update[k] = static_cast<float>((rank * 5 + step * 11 + static_cast<int>(k) * 3) % 19) * 0.013f - 0.1f;
  return update;
}

// The model's tensors laid out from `base` (host or fake-device memory).
chorus::averaging::parameters tensors_from(float* base) {
  std::vector<std::span<float>> parts;
  std::size_t offset = 0;
  for (std::size_t size : model_sizes) {
    parts.emplace_back(base + offset, size);
    offset += size;
  }
  return chorus::averaging::parameters(parts);
}

}  // namespace

TEST_CASE("D-PSGD with a device model on an NCCL communicator: mixes on the device, the same bits as on the host") {
  fake_gpu_with_nccl gpu_setup;
  fake_device& fake = gpu_setup.fake;
  chorus_test::fake_compute& kernels = gpu_setup.kernels;
  const auto& nccl_on_fake = gpu_setup.nccl;
  constexpr std::size_t total = model_total;
  const chorus::codec::any_codec wires[] = {chorus::codec::any_codec(), chorus::codec::by_name("fp16"),
                                            chorus::codec::any_codec(chorus::codec::int8{64})};
  for (const chorus::codec::any_codec& wire : wires) {
    for (int n : {2, 3, 5}) {
      CAPTURE(wire.name());
      CAPTURE(n);
      std::atomic<std::size_t> wrong{0};
      const int reductions_before = kernels.launches.load();
      chorus::run_threads(
          n,
          [&](communicator& comm) {
            const chorus::averaging::dpsgd_options options{chorus::averaging::topology::ring(n), wire};
            // The same 4 steps on host memory over UCX, and on the fake device over "NCCL".
            std::vector<float> host(total);
            for (std::size_t k = 0; k < total; ++k) host[k] = start_value(comm.rank(), k);
            auto* device = static_cast<float*>(fake.allocate_device(total * sizeof(float)));
            fake.write(device, std::span<const float>(host));
            nccl::communicator gpus(comm, nccl_on_fake);
            {
              chorus::averaging::dpsgd on_host(comm, tensors_from(host.data()), options);
              chorus::averaging::dpsgd on_device(gpus, tensors_from(device), options);
              for (int step = 0; step < 4; ++step) {
                const std::vector<float> grads = update_of(comm.rank(), step);
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
              wrong += count_different(fake.read(device, total), host);
            }
            fake.free_device(device);
          },
          quick());
      CHECK(wrong.load() == 0);
      CHECK(kernels.launches.load() > reductions_before);  // the mixing ran on the device
    }
  }
}

TEST_CASE("DiLoCo with a device model on an NCCL communicator: syncs on its chorus side, the host run's bits") {
  fake_gpu_with_nccl gpu_setup;
  fake_device& fake = gpu_setup.fake;
  // Plain DiLoCo; streaming (two fragments, tau 1, alpha 0.5); int8 outer gradients.
  const chorus::averaging::diloco_options shapes[] = {
      {.period = 3},
      {.period = 4, .fragments = 2, .fragment_of = {0, 1, 1}, .overlap_steps = 1, .mixing = 0.5},
      {.period = 3, .codec = chorus::codec::any_codec(chorus::codec::int8{64})},
  };
  for (const chorus::averaging::diloco_options& options : shapes) {
    for (int n : {2, 3}) {
      CAPTURE(options.fragments);
      CAPTURE(options.codec.name());
      CAPTURE(n);
      std::atomic<std::size_t> wrong{0};
      chorus::run_threads(
          n,
          [&](communicator& comm) {
            std::vector<float> host(model_total);
            for (std::size_t k = 0; k < model_total; ++k) host[k] = start_value(comm.rank(), k);
            auto* device = static_cast<float*>(fake.allocate_device(model_total * sizeof(float)));
            fake.write(device, std::span<const float>(host));
            nccl::communicator gpus(comm, gpu_setup.nccl);
            {
              chorus::averaging::diloco on_host(comm, tensors_from(host.data()), options);
              chorus::averaging::diloco on_device(gpus, tensors_from(device), options);
              static_assert(std::is_same_v<decltype(on_device), chorus::averaging::diloco<communicator>>);
              // rank 0's start everywhere, on the device too
              wrong += count_different(fake.read(device, model_total), host);
              for (int step = 0; step < 9; ++step) {
                const std::vector<float> update = update_of(comm.rank(), step);
                for (std::size_t k = 0; k < model_total; ++k) host[k] -= update[k];
                on_host.end_step();
                std::vector<float> now = fake.read(device, model_total);
                for (std::size_t k = 0; k < model_total; ++k) now[k] -= update[k];
                fake.write(device, std::span<const float>(now));
                on_device.end_step();
              }
              on_host.finish();
              on_device.finish();
              wrong += on_device.syncs() == 0 || on_device.syncs() != on_host.syncs();
              wrong += count_different(fake.read(device, model_total), host);
            }
            // every rank ends on the same global model
            std::vector<float> all(model_total * static_cast<std::size_t>(n));
            chorus::allgather(comm, std::span<const float>(host), std::span(all));
            for (std::size_t k = 0; k < all.size(); ++k) wrong += all[k] != all[k % model_total];
            fake.free_device(device);
          },
          quick());
      CHECK(wrong.load() == 0);
    }
  }
}
