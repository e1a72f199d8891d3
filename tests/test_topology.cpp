// Topologies: stochasticity of every constructor, clear errors for bad user
// weights, and spectral gaps against closed forms.
#include <chorus/averaging/topology.hpp>

#include "expect_error.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <numbers>
#include <vector>

using chorus::averaging::stochastic;
using chorus::averaging::topology;
using chorus_test::expect_error;

namespace {

std::vector<topology> all_kinds(int n) {
  std::vector<topology> kinds{topology::ring(n), topology::exponential(n), topology::one_peer_exponential(n),
                              topology::fully_connected(n)};
  if (n % 2 == 0) kinds.push_back(topology::torus(2, n / 2));
  return kinds;
}

// sum_j W_ij x_j through the sparse rows, against the dense matrix.
double sparse_times(const chorus::averaging::mixing_matrix& w, int i, const std::vector<double>& x) {
  double sum = 0;
  for (const auto& entry : w.row(i)) sum += entry.weight * x[static_cast<std::size_t>(entry.peer)];
  return sum;
}

}  // namespace

TEST_CASE("every built-in topology is doubly stochastic, with rows and columns that agree") {
  for (int n : {1, 2, 3, 5, 6, 7, 8, 12}) {
    for (const topology& t : all_kinds(n)) {
      CAPTURE(n);
      CAPTURE(t.name());
      CHECK(t.size() == n);
      CHECK(t.is_doubly_stochastic());
      for (std::size_t p = 0; p < t.period(); ++p) {
        const auto dense = t.at(p).dense();
        for (int i = 0; i < n; ++i)
          for (const auto& entry : t.at(p).column(i))
            CHECK(dense[static_cast<std::size_t>(entry.peer)][static_cast<std::size_t>(i)] ==
                  doctest::Approx(entry.weight));
        std::vector<double> x(static_cast<std::size_t>(n));
        for (int j = 0; j < n; ++j) x[static_cast<std::size_t>(j)] = j * j + 1.0;
        for (int i = 0; i < n; ++i) {
          double expected = 0;
          for (int j = 0; j < n; ++j)
            expected +=
                dense[static_cast<std::size_t>(i)][static_cast<std::size_t>(j)] * x[static_cast<std::size_t>(j)];
          CHECK(sparse_times(t.at(p), i, x) == doctest::Approx(expected));
        }
      }
    }
  }
}

TEST_CASE("ring weights are 1/3 and its spectral gap matches the circulant eigenvalues") {
  const topology ring = topology::ring(7);
  CHECK(ring.at(0).weight(3, 3) == doctest::Approx(1.0 / 3));
  CHECK(ring.at(0).weight(3, 2) == doctest::Approx(1.0 / 3));
  CHECK(ring.at(0).weight(3, 4) == doctest::Approx(1.0 / 3));
  CHECK(ring.at(0).weight(3, 5) == 0.0);
  for (int n : {3, 5, 7, 10}) {
    double largest = 0;  // eigenvalues (1 + 2 cos(2 pi k / n)) / 3, k != 0
    for (int k = 1; k < n; ++k)
      largest = std::max(largest, std::fabs((1 + 2 * std::cos(2 * std::numbers::pi * k / n)) / 3));
    CAPTURE(n);
    CHECK(topology::ring(n).spectral_gap() == doctest::Approx(1 - largest).epsilon(1e-9));
  }
  CHECK(topology::ring(2).at(0).weight(0, 1) == doctest::Approx(2.0 / 3));  // both neighbours are the same rank
}

TEST_CASE("spectral gaps: fully connected and one-peer exponential over a period are exact") {
  CHECK(topology::fully_connected(6).spectral_gap() == doctest::Approx(1.0));
  for (int n : {2, 4, 8, 16}) {
    const topology one_peer = topology::one_peer_exponential(n);
    CAPTURE(n);
    CHECK(one_peer.period() == static_cast<std::size_t>(std::log2(n)));
    CHECK(one_peer.spectral_gap() == doctest::Approx(1.0));
  }
  const topology odd = topology::one_peer_exponential(6);  // not exact: gap strictly inside (0, 1)
  CHECK(odd.spectral_gap() > 0.0);
  CHECK(odd.spectral_gap() < 1.0);
  // The exponential graph mixes faster than the ring of the same size.
  CHECK(topology::exponential(12).spectral_gap() > topology::ring(12).spectral_gap());
  // 2x2 [[3/4, 1/4], [1/4, 3/4]]: eigenvalues 1 and 1/2.
  CHECK(topology::from_weights({{0.75, 0.25}, {0.25, 0.75}}).spectral_gap() == doctest::Approx(0.5));
}

TEST_CASE("torus: 1/5 for self and each of four neighbours") {
  const topology torus = topology::torus(3, 4);
  CHECK(torus.size() == 12);
  const auto& w = torus.at(0);
  CHECK(w.row(5).size() == 5);
  for (int peer : {5, 1, 9, 4, 6}) CHECK(w.weight(5, peer) == doctest::Approx(0.2));
}

TEST_CASE("user weights are checked with clear errors") {
  using chorus::errc;
  expect_error([] { topology::from_weights({{0.5, 0.5}, {0.5}}); }, errc::invalid_argument, "row 1 has 1 entries");
  expect_error([] { topology::from_weights({{1.5, -0.5}, {-0.5, 1.5}}); }, errc::invalid_argument,
               "not a finite non-negative");
  expect_error([] { topology::from_weights({{0.5, 0.5}, {0.2, 0.7}}); }, errc::invalid_argument, "row 1 sums to 0.9");
  const std::vector<std::vector<double>> column_only{{0.5, 1.0, 0.0}, {0.5, 0.0, 0.5}, {0.0, 0.0, 0.5}};
  expect_error([&] { topology::from_weights(column_only); }, errc::invalid_argument,
               "not doubly stochastic: row 0 sums to 1.5");
  const topology push = topology::from_weights(column_only, stochastic::column);
  CHECK(push.is_column_stochastic());
  CHECK_FALSE(push.is_row_stochastic());
  expect_error([] { topology::ring(0); }, errc::invalid_argument, "at least 1 rank");
}
