// Compressed collectives over the real UCX transport, ranks as threads:
// within the stated bound of the exact result, identical bits on all ranks.
#include <chorus/chorus.hpp>

#include "expect_error.hpp"
#include "support.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

using namespace std::chrono_literals;
using chorus::communicator;
using chorus_test::quick;
namespace codec = chorus::codec;

namespace {

// Rank r's contribution: mixed signs and magnitudes that differ per rank.
std::vector<float> contribution(int rank, std::size_t count, float magnitude = 1.0f) {
  std::vector<float> x(count);
  for (std::size_t i = 0; i < count; ++i) {
    const auto k = static_cast<float>((i * 2654435761u + static_cast<std::size_t>(rank) * 40503u) % 2001) - 1000.0f;
    x[i] = magnitude * (k / 1000.0f) * (1.0f + 0.25f * static_cast<float>(rank % 3));
  }
  return x;
}

struct outcome {
  std::size_t outside = 0, differing = 0;
};

// Runs the compressed allreduce (sum) of each count in turn on one job of
// `ranks` threads and compares each with the exact sum and across ranks.
template <class MakeCodec>
std::vector<outcome> run_allreduces(int ranks, const std::vector<std::size_t>& counts, MakeCodec make,
                                    chorus::compression_options options = {}) {
  // results[call][rank]
  std::vector<std::vector<std::vector<float>>> results(counts.size(),
                                                       std::vector<std::vector<float>>(static_cast<std::size_t>(ranks)));
  chorus::run_threads(
      ranks,
      [&](communicator& comm) {
        auto coder = make();
        for (std::size_t call = 0; call < counts.size(); ++call) {
          std::vector<float> data = contribution(comm.rank(), counts[call]);
          chorus::allreduce(comm, std::span(data), chorus::op::sum{}, coder, options);
          results[call][static_cast<std::size_t>(comm.rank())] = std::move(data);
        }
      },
      quick());
  const auto plain = [](const auto& c) -> decltype(auto) {
    return codec::codec_of<std::remove_cvref_t<decltype(c)>>::get(c);
  };
  const auto sample = make();
  std::vector<outcome> outcomes;
  for (std::size_t call = 0; call < counts.size(); ++call) {
    const std::size_t count = counts[call];
    std::vector<std::vector<float>> inputs;
    for (int r = 0; r < ranks; ++r) inputs.push_back(contribution(r, count));
    const auto bound = chorus::compressed::allreduce_error_bound(plain(sample), std::span(inputs), options);
    const auto& result = results[call];
    outcome o;
    for (std::size_t i = 0; i < count; ++i) {
      double exact = 0;
      for (const auto& x : inputs) exact += x[i];
      if (!(std::fabs(result[0][i] - exact) <= bound[i])) ++o.outside;
    }
    for (const auto& r : result)
      o.differing += count != 0 && std::memcmp(r.data(), result[0].data(), count * sizeof(float)) != 0;
    outcomes.push_back(o);
  }
  return outcomes;
}

template <class MakeCodec>
outcome run_allreduce(int ranks, std::size_t count, MakeCodec make, chorus::compression_options options = {}) {
  return run_allreduces(ranks, {count}, make, options).front();
}

struct scheme_case {
  std::string_view name;
  chorus::compression_options options;
};

chorus::compression_options forced(chorus::compression_scheme scheme, std::size_t chunk_bytes = 4u << 20) {
  chorus::compression_options options;
  options.scheme = scheme;
  options.chunk_bytes = chunk_bytes;
  return options;
}

// Both schemes, and encode-once cut into chunks of 256 encoded bytes so that
// its pipelined path runs on small tensors (1000 int8 elements: 3 chunks).
const scheme_case every_scheme[] = {{"once", forced(chorus::compression_scheme::encode_once)},
                                    {"once in chunks", forced(chorus::compression_scheme::encode_once, 256)},
                                    {"ring", forced(chorus::compression_scheme::ring)}};

// Every scheme, on 1..9 ranks, with counts that are empty, tiny, odd, and
// (70001) more than one ring segment.
template <class MakeCodec>
void every_rank_count(MakeCodec make) {
  for (const scheme_case& scheme : every_scheme)
    for (int ranks = 1; ranks <= 9; ++ranks) {
      // One job per rank count, its calls one after another on the same
      // codec object (starting the threads is most of a small call's time).
      const std::vector<std::size_t> counts{0, 1, 7, 1000, 70001};
      const std::vector<outcome> outcomes = run_allreduces(ranks, counts, make, scheme.options);
      for (std::size_t call = 0; call < counts.size(); ++call) {
        CAPTURE(scheme.name);
        CAPTURE(ranks);
        CAPTURE(counts[call]);
        CHECK(outcomes[call].outside == 0);
        CHECK(outcomes[call].differing == 0);
      }
    }
}

}  // namespace

TEST_CASE("compressed allreduce, fp16: within the bound of the exact sum on 1..9 ranks, identical everywhere") {
  every_rank_count([] { return codec::fp16{}; });
}

TEST_CASE("compressed allreduce, bf16 and identity") {
  every_rank_count([] { return codec::bf16{}; });
  every_rank_count([] { return codec::identity{}; });
}

TEST_CASE("compressed allreduce, int8 (odd block size too)") {
  every_rank_count([] { return codec::int8{}; });
  every_rank_count([] { return codec::int8{24}; });
}

TEST_CASE("compressed allreduce, fp4 (a block size that is not a power of two)") {
  every_rank_count([] { return codec::fp4_e2m1{40}; });
}

TEST_CASE("compressed allreduce, onebit") {
  every_rank_count([] { return codec::onebit{}; });
}

TEST_CASE("compressed allreduce with error feedback: identical on all ranks, residual carried over") {
  for (int ranks : {3, 5}) {
    std::vector<double> carried(static_cast<std::size_t>(ranks));
    chorus::run_threads(
        ranks,
        [&](communicator& comm) {
          codec::error_feedback feedback{codec::onebit{}};
          std::vector<float> data = contribution(comm.rank(), 5000);
          chorus::allreduce(comm, std::span(data), chorus::op::sum{}, feedback);
          double total = 0;
          for (float r : feedback.residual(0)) total += std::fabs(r);
          carried[static_cast<std::size_t>(comm.rank())] = total;
          // The next call adds the residual back in, so two steps of the same
          // gradient deliver ~2x of it: closer than one step's error alone.
          std::vector<float> again = contribution(comm.rank(), 5000);
          chorus::allreduce(comm, std::span(again), chorus::op::sum{}, feedback);
        },
        quick());
    for (double c : carried) CHECK(c > 0.0);
  }
}

TEST_CASE("encode-once with error feedback keeps exactly what encoding its contribution lost, chunked or not") {
  // Parts and chunks follow the codec's blocks, so the residual of slot 0 is
  // x - decode(encode(x)) of the whole contribution, element for element.
  for (const scheme_case& scheme : every_scheme) {
    if (scheme.options.scheme != chorus::compression_scheme::encode_once) continue;
    CAPTURE(scheme.name);
    const std::size_t count = 3000;
    std::vector<std::size_t> misplaced(5);
    chorus::run_threads(
        5,
        [&](communicator& comm) {
          codec::error_feedback feedback{codec::int8{}};
          std::vector<float> data = contribution(comm.rank(), count);
          chorus::allreduce(comm, std::span(data), chorus::op::sum{}, feedback, scheme.options);
          const std::vector<float> x = contribution(comm.rank(), count);
          std::vector<std::byte> bytes(codec::int8{}.encoded_bytes(count));
          std::vector<float> decoded(count);
          codec::int8{}.encode(x, bytes);
          codec::int8{}.decode(bytes, decoded);
          for (std::size_t i = 0; i < count; ++i)
            misplaced[static_cast<std::size_t>(comm.rank())] += feedback.residual(0)[i] != x[i] - decoded[i];
        },
        quick());
    for (std::size_t m : misplaced) CHECK(m == 0);
  }
}

TEST_CASE("error feedback over steps: the time-averaged compressed sum converges to the exact sum") {
  for (const scheme_case& scheme : every_scheme) {
    CAPTURE(scheme.name);
    const int ranks = 4, steps = 40;
    const std::size_t count = 3000;
    std::vector<double> delivered(count, 0.0), exact(count, 0.0);
    const chorus::compression_options options = scheme.options;
    chorus::run_threads(
        ranks,
        [&](communicator& comm) {
          codec::error_feedback feedback{codec::int8{}};
          for (int step = 0; step < steps; ++step) {
            std::vector<float> data = contribution(comm.rank(), count);
            chorus::allreduce(comm, std::span(data), chorus::op::sum{}, feedback, options);
            if (comm.rank() == 0)
              for (std::size_t i = 0; i < count; ++i) delivered[i] += data[i];
          }
        },
        quick());
    for (int r = 0; r < ranks; ++r) {
      const auto x = contribution(r, count);
      for (std::size_t i = 0; i < count; ++i) exact[i] += steps * static_cast<double>(x[i]);
    }
    double worst_average = 0;
    for (std::size_t i = 0; i < count; ++i)
      worst_average = std::max(worst_average, std::fabs(delivered[i] - exact[i]) / steps);
    // One int8 step errs by up to ~4 * 1.5/254 + the sum's own ~6/254 (the ring: up to 4 encodings of
    // partial sums of ~6); averaged over 40 steps with feedback the residual is bounded, so the mean
    // error shrinks like 1/steps.
    CHECK(worst_average < 0.01);
  }
}

TEST_CASE("pre-division keeps an fp16 sum of 8 ranks of values near 6e4 finite") {
  const std::size_t count = 1024;
  for (bool prescaled : {true, false}) {
    std::vector<float> result;
    chorus::run_threads(
        8,
        [&](communicator& comm) {
          std::vector<float> data(count);
          for (std::size_t i = 0; i < count; ++i) data[i] = 6.0e4f + static_cast<float>(i % 64) * 8.0f;
          chorus::compression_options options;
          if (!prescaled) options.prescale = 1.0f;
          chorus::allreduce(comm, std::span(data), chorus::op::sum{}, codec::fp16{codec::overflow::infinity}, options);
          if (comm.rank() == 0) result = data;
        },
        quick());
    std::size_t finite = 0, close = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const double exact = 8.0 * (6.0e4 + static_cast<double>(i % 64) * 8.0);
      finite += std::isfinite(result[i]);
      close += std::fabs(result[i] - exact) <= exact * 0x1p-10;
    }
    if (prescaled) {
      CHECK(finite == count);
      CHECK(close == count);
    } else {
      CHECK(finite == 0);  // the naive fp16 sum overflows: what pre-division prevents
    }
  }
}

template <class Codec>
std::size_t outside_average_bound(const Codec& c, chorus::compression_options options) {
  const int ranks = 6;
  const std::size_t count = 777;
  std::vector<float> result;
  chorus::run_threads(
      ranks,
      [&](communicator& comm) {
        std::vector<float> data = contribution(comm.rank(), count);
        chorus::allreduce(comm, std::span(data), chorus::op::avg{}, c, options);
        if (comm.rank() == 0) result = data;
      },
      quick());
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < ranks; ++r) inputs.push_back(contribution(r, count));
  const auto bound = chorus::compressed::allreduce_error_bound(c, std::span(inputs), options);
  std::size_t outside = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double exact = 0;
    for (const auto& x : inputs) exact += x[i];
    outside += !(std::fabs(result[i] - exact / ranks) <= bound[i] / ranks + 1e-6);
  }
  return outside;
}

TEST_CASE("compressed allreduce, avg: the bound of the sum divided by n") {
  for (const scheme_case& scheme : every_scheme) {
    CAPTURE(scheme.name);
    CHECK(outside_average_bound(codec::int8{}, scheme.options) == 0);
    CHECK(outside_average_bound(codec::fp16{}, scheme.options) == 0);
  }
}

TEST_CASE("the automatic scheme: the ring for fp16 and bf16 from 1 MiB encoded, encode-once otherwise") {
  using chorus::compression_scheme;
  const chorus::compression_options automatic;
  const std::size_t ring_floats = (std::size_t{1} << 20) / 2;  // 1 MiB of fp16 or bf16: the defaults' boundary
  CHECK(chorus::compressed::scheme_for(codec::fp16{}, 4, ring_floats, automatic) == compression_scheme::ring);
  CHECK(chorus::compressed::scheme_for(codec::bf16{}, 4, ring_floats, automatic) == compression_scheme::ring);
  CHECK(chorus::compressed::scheme_for(codec::fp16{}, 4, ring_floats - 1, automatic) ==
        compression_scheme::encode_once);
  CHECK(chorus::compressed::scheme_for(codec::int8{}, 4, 100 * ring_floats, automatic) ==
        compression_scheme::encode_once);
  CHECK(chorus::compressed::scheme_for(codec::onebit{}, 4, 100 * ring_floats, automatic) ==
        compression_scheme::encode_once);
  CHECK(chorus::compressed::scheme_for(codec::fp16{}, 1, 100 * ring_floats, automatic) ==
        compression_scheme::encode_once);
  chorus::compression_options forced;
  forced.scheme = compression_scheme::ring;
  CHECK(chorus::compressed::scheme_for(codec::int8{}, 3, 10, forced) == compression_scheme::ring);
  // A large fp16 tensor through the automatic choice (the ring) on 3 ranks.
  const outcome o = run_allreduce(3, ring_floats + 12345, [] { return codec::fp16{}; });
  CHECK(o.outside == 0);
  CHECK(o.differing == 0);
}

TEST_CASE("encode-once chunks: encoded size / chunk_bytes, within 1..4 and the tensor's codec blocks") {
  using chorus::compressed::once_chunks;
  const std::size_t mib = 1u << 20;
  CHECK(once_chunks(codec::int8{}, 16 * mib, 4, 4 * mib) == 4);  // 16.25 MiB encoded
  CHECK(once_chunks(codec::int8{}, 8 * mib, 4, 4 * mib) == 2);   // 8.1 MiB
  CHECK(once_chunks(codec::int8{}, 4 * mib, 4, 4 * mib) == 1);   // 4.06 MiB: one chunk
  CHECK(once_chunks(codec::int8{}, 64 * mib, 4, 4 * mib) == 4);  // never more than 4
  CHECK(once_chunks(codec::int8{}, 64 * mib, 1, 4 * mib) == 1);  // one rank: nothing to overlap
  CHECK(once_chunks(codec::int8{}, 64 * mib, 4, 0) == 1);        // 0 turns chunking off
  CHECK(once_chunks(codec::int8{}, 300, 4, 1) == 2);             // two int8 blocks: two chunks
  CHECK(once_chunks(codec::int8{}, 0, 4, 1) == 1);
}

TEST_CASE("the ring's stated bound is the looser one, and both hold their own results") {
  // The ring re-encodes partial sums: its bound must cover n encodings, so
  // it exceeds encode-once's for n > 2 (a bound that did not would be wrong).
  std::vector<std::vector<float>> inputs;
  for (int r = 0; r < 5; ++r) inputs.push_back(contribution(r, 64));
  chorus::compression_options ring, once;
  ring.scheme = chorus::compression_scheme::ring;
  once.scheme = chorus::compression_scheme::encode_once;
  const auto ring_bound = chorus::compressed::allreduce_error_bound(codec::fp16{}, std::span(inputs), ring);
  const auto once_bound = chorus::compressed::allreduce_error_bound(codec::fp16{}, std::span(inputs), once);
  for (std::size_t i = 0; i < 64; ++i) CHECK(ring_bound[i] > once_bound[i]);
}

TEST_CASE("compressed allgather and broadcast: everyone holds decode(encode(x)) exactly") {
  for (int ranks : {1, 3, 7}) {
    CAPTURE(ranks);
    const std::size_t count = 1001;
    std::vector<std::size_t> wrong(static_cast<std::size_t>(ranks));
    chorus::run_threads(
        ranks,
        [&](communicator& comm) {
          const codec::int8 c{64};
          const auto mine = contribution(comm.rank(), count);
          std::vector<float> all(count * static_cast<std::size_t>(ranks));
          chorus::allgather(comm, std::span<const float>(mine), std::span(all), c);
          std::size_t bad = 0;
          for (int r = 0; r < ranks; ++r) {
            const auto x = contribution(r, count);
            std::vector<std::byte> bytes(c.encoded_bytes(count));
            std::vector<float> expected(count);
            c.encode(x, bytes);
            c.decode(bytes, expected);
            bad += std::memcmp(expected.data(), all.data() + static_cast<std::size_t>(r) * count,
                               count * sizeof(float)) != 0;
          }
          const int root = ranks - 1;
          std::vector<float> model = comm.rank() == root ? contribution(root, count) : std::vector<float>(count, -1.0f);
          chorus::broadcast(comm, std::span(model), root, codec::bf16{});
          const auto root_x = contribution(root, count);
          std::vector<float> expected(count);
          std::vector<std::byte> bytes(codec::bf16{}.encoded_bytes(count));
          codec::bf16{}.encode(root_x, bytes);
          codec::bf16{}.decode(bytes, expected);
          bad += std::memcmp(expected.data(), model.data(), count * sizeof(float)) != 0;
          wrong[static_cast<std::size_t>(comm.rank())] = bad;
        },
        quick());
    for (std::size_t w : wrong) CHECK(w == 0);
  }
}

namespace {

// The sparse allreduce on `ranks` threads: every rank's result, after
// `calls` calls (each on contribution(rank, count)).
template <class MakeCoder>
std::vector<std::vector<float>> sparse_results(int ranks, std::size_t count, MakeCoder make, bool average = false) {
  std::vector<std::vector<float>> results(static_cast<std::size_t>(ranks));
  chorus::run_threads(
      ranks,
      [&](communicator& comm) {
        auto coder = make();
        std::vector<float> data = contribution(comm.rank(), count);
        const chorus::algorithm ran = average ? chorus::allreduce(comm, std::span(data), chorus::op::avg{}, coder)
                                              : chorus::allreduce(comm, std::span(data), chorus::op::sum{}, coder);
        CHECK(ran == chorus::algorithm::sparse);
        results[static_cast<std::size_t>(comm.rank())] = data;
      },
      quick());
  return results;
}

std::size_t differing_from_first(const std::vector<std::vector<float>>& results) {
  std::size_t differing = 0;
  for (const auto& r : results)
    differing += !r.empty() && std::memcmp(r.data(), results[0].data(), r.size() * sizeof(float)) != 0;
  return differing;
}

// Rank r's k largest magnitudes by a full sort, the rest zero.
std::vector<float> sorted_top(const std::vector<float>& x, std::size_t k) {
  std::vector<std::size_t> order(x.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return std::fabs(x[a]) > std::fabs(x[b]); });
  std::vector<float> kept(x.size(), 0.0f);
  for (std::size_t j = 0; j < k; ++j) kept[order[j]] = x[order[j]];
  return kept;
}

}  // namespace

TEST_CASE("sparse allreduce, topk: the sum of every rank's k largest, in rank order, identical everywhere") {
  for (int ranks : {1, 2, 3, 5, 7})
    for (std::size_t count : {0u, 1u, 7u, 1000u, 70001u})
      for (bool average : {false, true}) {
        CAPTURE(ranks);
        CAPTURE(count);
        CAPTURE(average);
        const codec::topk c{0.05};
        const auto results = sparse_results(ranks, count, [&] { return c; }, average);
        std::vector<float> expected(count, 0.0f);
        for (int r = 0; r < ranks; ++r) {
          const auto kept = sorted_top(contribution(r, count), c.kept(count));
          for (std::size_t i = 0; i < count; ++i) expected[i] += kept[i];
        }
        if (average)
          for (float& e : expected) e /= static_cast<float>(ranks);
        std::size_t wrong = 0;
        for (std::size_t i = 0; i < count; ++i) wrong += results[0][i] != expected[i];
        CHECK(wrong == 0);
        CHECK(differing_from_first(results) == 0);
      }
}

TEST_CASE("sparse allreduce, randomk: the kept values summed where every rank kept them, zero elsewhere") {
  for (int ranks : {1, 2, 3, 6})
    for (std::size_t count : {0u, 1u, 7u, 1000u, 70001u}) {
      CAPTURE(ranks);
      CAPTURE(count);
      const auto results = sparse_results(ranks, count, [] { return codec::randomk{0.02, 9}; });
      const std::size_t k = codec::randomk{0.02}.kept(count);
      std::size_t nonzero = 0, wrong = 0;
      for (std::size_t i = 0; i < count; ++i) {
        if (results[0][i] == 0.0f) continue;
        ++nonzero;
        float exact = 0.0f;
        for (int r = 0; r < ranks; ++r) exact += contribution(r, count)[i];
        wrong += std::fabs(results[0][i] - exact) > 1e-5f * static_cast<float>(ranks);
      }
      CHECK(nonzero <= k);
      CHECK(nonzero + 2 >= k);  // a kept sum may be zero by chance; not more than that
      CHECK(wrong == 0);
      CHECK(differing_from_first(results) == 0);
    }
}

TEST_CASE("sparse allreduce with error feedback: over many steps the delivered sum approaches the exact one") {
  // Outputs plus residuals equal the inputs, so the running average of what
  // was delivered converges to the exact sum at rate |residual| / steps.
  for (auto which : {0, 1}) {
    CAPTURE(which);
    const int ranks = 3, steps = 60;
    const std::size_t count = 500;
    std::vector<double> delivered(count, 0.0);
    std::vector<double> worst_residual(ranks, 0.0);
    std::mutex lock;
    chorus::run_threads(
        ranks,
        [&](communicator& comm) {
          auto run = [&](auto feedback) {
            for (int step = 0; step < steps; ++step) {
              std::vector<float> data = contribution(comm.rank(), count);
              chorus::allreduce(comm, std::span(data), chorus::op::sum{}, feedback);
              if (comm.rank() == 0)
                for (std::size_t i = 0; i < count; ++i) delivered[i] += data[i];
            }
            double largest = 0;
            for (float r : feedback.residual(0)) largest = std::max(largest, static_cast<double>(std::fabs(r)));
            std::lock_guard guard(lock);
            worst_residual[static_cast<std::size_t>(comm.rank())] = largest;
          };
          if (which == 0)
            run(codec::error_feedback{codec::topk{0.1}});
          else
            run(codec::error_feedback{codec::randomk{0.1, 3}});
        },
        quick());
    double largest_residual = 0;
    for (double r : worst_residual) largest_residual = std::max(largest_residual, r);
    double worst = 0;
    for (std::size_t i = 0; i < count; ++i) {
      double exact = 0;
      for (int r = 0; r < ranks; ++r) exact += contribution(r, count)[i];
      worst = std::max(worst, std::fabs(delivered[i] / steps - exact));
    }
    // Exactly: delivered = steps * exact - sum of final residuals (float rounding aside).
    CHECK(worst <= ranks * largest_residual / steps + 1e-3);
    // top-k sends every large residual soon, so it stays small; random-k
    // waits for the draw (10 calls on average at 0.1), so its residual is a
    // few times the values and the identity above is the check.
    if (which == 0) CHECK(worst < 0.5);
  }
}

TEST_CASE("sparse allreduce: mismatched random-k seeds fail on every rank; schemes that cannot move a codec say so") {
  std::vector<std::string> errors(3);
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        codec::randomk c{0.1, comm.rank() == 1 ? 2u : 1u};
        std::vector<float> data = contribution(comm.rank(), 100);
        try {
          chorus::allreduce(comm, std::span(data), chorus::op::sum{}, c);
        } catch (const chorus::error& e) {
          errors[static_cast<std::size_t>(comm.rank())] = e.what();
        }
      },
      quick());
  for (const auto& e : errors) CHECK(e.find("different keys") != std::string::npos);
  chorus::run_threads(
      2,
      [&](communicator& comm) {
        std::vector<float> data(10, 1.0f);
        chorus_test::expect_error(
            [&] {
              chorus::allreduce(comm, std::span(data), chorus::op::sum{}, codec::topk{0.1},
                                forced(chorus::compression_scheme::ring));
            },
            chorus::errc::invalid_argument, "only the sparse scheme does");
        chorus_test::expect_error(
            [&] {
              chorus::allreduce(comm, std::span(data), chorus::op::sum{}, codec::fp16{},
                                forced(chorus::compression_scheme::sparse));
            },
            chorus::errc::invalid_argument, "moves only sparse codecs");
      },
      quick());
}
