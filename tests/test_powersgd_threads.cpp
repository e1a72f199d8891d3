// PowerSGD (compressed/powersgd.hpp) over the real transport, ranks as
// threads, against closed forms: a mean of rank <= r comes through exactly
// (rank 1 at r = 1, rank 2 at r = 2) while vectors and small matrices are
// averaged exactly, with the same bits on every rank; error feedback hands
// what a step lost to the next (exactly, for a mean of rank r + 1); the warm start's power iteration finds the
// best rank-1 approximation (a serial power iteration in double is the
// reference); allreduce-SGD with PowerSGD converges on least squares; its
// traffic is (rows + cols) r per matrix; bad input is a clear error.
#include <chorus/chorus.hpp>

#include "expect_error.hpp"
#include "support.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

using chorus::communicator;
using chorus::matrix_shape;
using chorus_test::quick;
namespace avg = chorus::averaging;

namespace {

std::vector<float> pattern_vector(std::size_t count, double phase) {
  std::vector<float> values(count);
  for (std::size_t k = 0; k < count; ++k)
    values[k] = static_cast<float>(std::sin(phase + 1.7 * static_cast<double>(k)));
  return values;
}

// a * u v^T + b * w z^T, rows x cols.
std::vector<float> rank_two(std::size_t rows, std::size_t cols, double a, double b) {
  const std::vector<float> u = pattern_vector(rows, 0.3), v = pattern_vector(cols, 1.1);
  const std::vector<float> w = pattern_vector(rows, 2.0), z = pattern_vector(cols, 0.7);
  std::vector<float> m(rows * cols);
  for (std::size_t i = 0; i < rows; ++i)
    for (std::size_t k = 0; k < cols; ++k) m[i * cols + k] = static_cast<float>(a * u[i] * v[k] + b * w[i] * z[k]);
  return m;
}

double relative_gap(const std::vector<float>& got, const std::vector<double>& expected) {
  double gap = 0.0, norm = 0.0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    gap += (got[k] - expected[k]) * (got[k] - expected[k]);
    norm += expected[k] * expected[k];
  }
  return std::sqrt(gap / std::max(norm, 1e-300));
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

// Each rank's weights for the two rank-1 terms, and their means.
double a_of(int rank) { return 1.0 + 0.5 * rank; }
double b_of(int rank) { return 0.25 - 0.125 * rank; }

// The tensors every rank averages: a rank-2 (or rank-1) matrix, then
// tensors sent exactly: a vector, a column, a 2 x 2, one element, none.
const std::vector<matrix_shape> shapes = {{9, 7}, {1, 5}, {6, 1}, {2, 2}, {1, 1}, {1, 0}};

std::vector<std::vector<float>> tensors_of(int rank, double b_weight) {
  std::vector<std::vector<float>> tensors;
  tensors.push_back(rank_two(9, 7, a_of(rank), b_weight * b_of(rank)));
  for (std::size_t t = 1; t < shapes.size(); ++t)
    tensors.push_back(pattern_vector(shapes[t].elements(), rank + 0.1 * static_cast<double>(t)));
  return tensors;
}

std::vector<std::span<float>> spans_of(std::vector<std::vector<float>>& tensors) {
  std::vector<std::span<float>> spans;
  for (auto& tensor : tensors) spans.emplace_back(tensor);
  return spans;
}

// One average of the tensors over n ranks at rank r, then one of zero
// gradients. Checked against the serial mean: with error feedback the two
// results sum to the mean exactly (the second delivers what the first lost,
// which is of rank <= r here: the mean's rank is at most r + 1), and when
// the mean's rank is at most r the first alone is the mean.
void check_against_mean(int n, std::size_t r, double b_weight) {
  CAPTURE(n);
  CAPTURE(r);
  std::mutex guard;
  const auto ranks = static_cast<std::size_t>(n);
  std::vector<std::vector<std::vector<float>>> first(ranks), second(ranks);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        chorus::powersgd low_rank(shapes, {.rank = r, .seed = 9});
        CHECK(low_rank.compressed(0));
        for (std::size_t t = 1; t < shapes.size(); ++t) CHECK_FALSE(low_rank.compressed(t));
        std::vector<std::vector<float>> tensors = tensors_of(comm.rank(), b_weight);
        std::vector<std::span<float>> spans = spans_of(tensors);
        low_rank.average(comm, std::span<const std::span<float>>(spans));
        std::vector<std::vector<float>> zeros;
        for (const matrix_shape& shape : shapes) zeros.emplace_back(shape.elements(), 0.0f);
        std::vector<std::span<float>> zero_spans = spans_of(zeros);
        low_rank.average(comm, std::span<const std::span<float>>(zero_spans));
        const std::lock_guard<std::mutex> lock(guard);
        first[static_cast<std::size_t>(comm.rank())] = tensors;
        second[static_cast<std::size_t>(comm.rank())] = zeros;
      },
      quick());
  const bool exact_at_once = b_weight == 0.0 || r >= 2;
  for (std::size_t t = 0; t < shapes.size(); ++t) {
    CAPTURE(t);
    std::vector<double> mean(shapes[t].elements(), 0.0);
    for (int rank = 0; rank < n; ++rank) {
      const std::vector<float> given = tensors_of(rank, b_weight)[t];
      for (std::size_t k = 0; k < mean.size(); ++k) mean[k] += static_cast<double>(given[k]) / n;
    }
    std::vector<float> both(mean.size());
    for (std::size_t k = 0; k < mean.size(); ++k) both[k] = first[0][t][k] + second[0][t][k];
    CHECK(relative_gap(both, mean) < 1e-5);
    if (exact_at_once || t > 0) CHECK(relative_gap(first[0][t], mean) < 2e-6);
    if (!exact_at_once && t == 0) CHECK(relative_gap(first[0][t], mean) > 1e-2);  // it lost something
    for (std::size_t rank = 1; rank < ranks; ++rank) {                            // the same bits everywhere
      CHECK(same_bits(first[0][t], first[rank][t]));
      CHECK(same_bits(second[0][t], second[rank][t]));
    }
  }
}

// The best rank-1 approximation of m (rows x cols) by power iteration on
// m^T m in double: sigma u v^T.
std::vector<double> best_rank_one(const std::vector<float>& m, std::size_t rows, std::size_t cols) {
  std::vector<double> v(cols, 1.0), u(rows);
  for (int iteration = 0; iteration < 2000; ++iteration) {
    for (std::size_t i = 0; i < rows; ++i) {
      u[i] = 0;
      for (std::size_t k = 0; k < cols; ++k) u[i] += m[i * cols + k] * v[k];
    }
    double norm = 0;
    for (std::size_t k = 0; k < cols; ++k) {
      v[k] = 0;
      for (std::size_t i = 0; i < rows; ++i) v[k] += m[i * cols + k] * u[i];
      norm += v[k] * v[k];
    }
    for (double& value : v) value /= std::sqrt(norm);
  }
  std::vector<double> approximation(rows * cols);
  for (std::size_t i = 0; i < rows; ++i) {
    double mv = 0;
    for (std::size_t k = 0; k < cols; ++k) mv += m[i * cols + k] * v[k];
    for (std::size_t k = 0; k < cols; ++k) approximation[i * cols + k] = mv * v[k];  // (M v) v^T = sigma u v^T
  }
  return approximation;
}

}  // namespace

TEST_CASE("a mean of rank <= r comes through exactly; vectors and small matrices are averaged exactly") {
  SUBCASE("rank 1 at r = 1, 3 ranks") { check_against_mean(3, 1, 0.0); }
  SUBCASE("rank 1 at r = 1, 5 ranks") { check_against_mean(5, 1, 0.0); }
  SUBCASE("rank 2 at r = 2, 3 ranks") { check_against_mean(3, 2, 1.0); }
  SUBCASE("one rank") { check_against_mean(1, 1, 0.0); }
}

TEST_CASE("error feedback: what a step loses (a rank-2 mean at r = 1) the next step delivers") {
  SUBCASE("3 ranks") { check_against_mean(3, 1, 1.0); }
  SUBCASE("4 ranks") { check_against_mean(4, 1, 1.0); }
}

TEST_CASE("the warm start's power iteration finds the best rank-1 approximation of the mean") {
  const std::size_t rows = 12, cols = 9;
  // Every rank holds the same matrix: 5 u v^T + w z^T + small noise (a clear gap).
  std::vector<float> m = rank_two(rows, cols, 5.0, 1.0);
  for (std::size_t k = 0; k < m.size(); ++k) m[k] += static_cast<float>(0.05 * std::cos(3.1 * static_cast<double>(k)));
  const std::vector<double> best = best_rank_one(m, rows, cols);
  std::vector<float> last;
  std::mutex guard;
  chorus::run_threads(
      3,
      [&](communicator& comm) {
        chorus::powersgd low_rank({{rows, cols}}, {.rank = 1, .error_feedback = false, .seed = 4});
        std::vector<float> gradient;
        for (int step = 0; step < 60; ++step) {
          gradient = m;
          std::span<float> only(gradient);
          low_rank.average(comm, std::span<const std::span<float>>(&only, 1));
        }
        const std::lock_guard<std::mutex> lock(guard);
        if (comm.rank() == 0) last = gradient;
      },
      quick());
  CHECK(relative_gap(last, best) < 1e-4);
}

TEST_CASE("allreduce-SGD with PowerSGD at r = 1 converges on least squares (loss below 1e-4 of the start)") {
  // min over W (10 x 8) and b (8) of sum_r ||X_r W + 1 b^T - Y_r||^2 / (2 N), Y_r = X_r W* + 1 b*^T: each rank
  // holds 20 rows of the data; the gradient is full rank: each step moves along a rank-1 approximation of it.
  const std::size_t in = 10, out = 8, samples = 20;
  const int n = 3, steps = 1500;
  const auto data = [&](int rank) {
    std::vector<float> x(samples * in), y(samples * out);
    for (std::size_t s = 0; s < samples; ++s)
      for (std::size_t i = 0; i < in; ++i)
        x[s * in + i] = static_cast<float>(std::sin(0.37 * static_cast<double>(s * in + i) + rank));
    for (std::size_t s = 0; s < samples; ++s)
      for (std::size_t o = 0; o < out; ++o) {
        double target = 0.5 - 0.1 * static_cast<double>(o);  // b*
        for (std::size_t i = 0; i < in; ++i)
          target += x[s * in + i] * std::cos(0.5 * static_cast<double>(i * out + o));  // W*
        y[s * out + o] = static_cast<float>(target);
      }
    return std::pair{x, y};
  };
  // Loss and gradient on one rank's data (mean over the whole job's rows).
  const auto loss_and_gradient = [&](int rank, const std::vector<float>& w, const std::vector<float>& b,
                                     std::vector<float>* gw, std::vector<float>* gb) {
    const auto [x, y] = data(rank);
    double loss = 0.0;
    if (gw) std::fill(gw->begin(), gw->end(), 0.0f), std::fill(gb->begin(), gb->end(), 0.0f);
    for (std::size_t s = 0; s < samples; ++s)
      for (std::size_t o = 0; o < out; ++o) {
        double residual = b[o] - y[s * out + o];
        for (std::size_t i = 0; i < in; ++i) residual += x[s * in + i] * w[i * out + o];
        loss += residual * residual / (2.0 * samples * n);
        if (!gw) continue;
        const auto scale = static_cast<float>(residual / samples);
        for (std::size_t i = 0; i < in; ++i) (*gw)[i * out + o] += scale * x[s * in + i];
        (*gb)[o] += scale;
      }
    return loss;
  };
  const auto total_loss = [&](const std::vector<float>& w, const std::vector<float>& b) {
    double loss = 0.0;
    for (int rank = 0; rank < n; ++rank) loss += loss_and_gradient(rank, w, b, nullptr, nullptr);
    return loss;
  };
  const double start = total_loss(std::vector<float>(in * out, 0.0f), std::vector<float>(out, 0.0f));
  std::vector<double> finals(n);
  chorus::run_threads(
      n,
      [&](communicator& comm) {
        std::vector<float> w(in * out, 0.0f), b(out, 0.0f), gw(in * out), gb(out);
        avg::allreduce_sgd scheme(comm, avg::parameters({std::span<float>(w), std::span<float>(b)}),
                                  avg::parameters({std::span<float>(gw), std::span<float>(gb)}),
                                  {.low_rank_shapes = {{in, out}, {1, out}}, .low_rank = {.rank = 1, .seed = 3}});
        for (int step = 0; step < steps; ++step)
          scheme.step([&] { loss_and_gradient(comm.rank(), w, b, &gw, &gb); },
                      [&] {
                        for (std::size_t k = 0; k < w.size(); ++k) w[k] -= 0.3f * gw[k];
                        for (std::size_t k = 0; k < b.size(); ++k) b[k] -= 0.3f * gb[k];
                      });
        scheme.finish();
        finals[static_cast<std::size_t>(comm.rank())] = total_loss(w, b);
      },
      quick());
  for (double loss : finals) CHECK(loss < 1e-4 * start);
}

TEST_CASE("PowerSGD moves (rows + cols) r floats a matrix, vectors whole") {
  const chorus::powersgd low_rank({{784, 256}, {1, 256}, {256, 128}, {1, 128}, {128, 10}, {1, 10}}, {.rank = 2});
  CHECK(low_rank.floats_per_step() == (784 + 256) * 2 + 256 + (256 + 128) * 2 + 128 + (128 + 10) * 2 + 10);
}

TEST_CASE("PowerSGD rejects bad input with clear errors") {
  chorus_test::expect_error([] { chorus::powersgd({{4, 4}}, {.rank = 0}); }, chorus::errc::invalid_argument,
                            "rank is at least 1");
  chorus::run_threads(
      2,
      [&](communicator& comm) {
        chorus::powersgd low_rank({{8, 6}, {1, 3}}, {.rank = 1});
        std::vector<float> a(48), b(4);
        std::vector<std::span<float>> wrong_size = {a, b}, wrong_count = {a};
        chorus_test::expect_error([&] { low_rank.average(comm, std::span<const std::span<float>>(wrong_size)); },
                                  chorus::errc::invalid_argument,
                                  "gradient tensor 1 has 4 elements, its shape 1 x 3 has 3");
        chorus_test::expect_error([&] { low_rank.average(comm, std::span<const std::span<float>>(wrong_count)); },
                                  chorus::errc::invalid_argument, "1 gradient tensors for a PowerSGD of 2 shapes");
        std::vector<float> w(48), gw(48);
        chorus_test::expect_error(
            [&] {
              avg::allreduce_sgd scheme(comm, avg::parameters(std::span<float>(w)),
                                        avg::parameters(std::span<float>(gw)),
                                        {.codec = chorus::codec::by_name("fp16"), .low_rank_shapes = {{8, 6}}});
            },
            chorus::errc::invalid_argument, "a codec or PowerSGD");
      },
      quick());
}
