// Topologies: who averages with whom, as mixing matrices W (x_i <- sum_j
// W_ij x_j). A topology is one matrix, or a cycle of them for dynamic graphs
// (round t uses phase t mod period).
//
//   ring(n)                   W = (I + S + S^-1) / 3: 1/3 self, 1/3 each neighbour
//   torus(rows, cols)         2-D torus, 1/5 self and each of 4 neighbours
//   exponential(n)            static exponential graph (Ying et al. 2021): i
//                             hears from i - 2^k for 2^k < n, uniform weights
//   one_peer_exponential(n)   round t: i hears only from i - 2^(t mod log2 n),
//                             weights 1/2; exact mean after log2 n rounds for
//                             n a power of two
//   fully_connected(n)        W = J / n (exact averaging in one round)
//   from_weights(W)           user weights, checked for the stochasticity the
//                             caller needs (doubly, row or column)
//
// Doubly stochastic W preserves the average and drives the models to it at a
// rate set by the spectral gap 1 - ||W - J/n||_2 (J the all-ones matrix);
// for a dynamic topology spectral_gap() is per round over one period:
// 1 - ||W_{p-1}...W_0 - J/n||_2^(1/p). Larger is faster; 1 is exact.
#pragma once

#include <chorus/core/error.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <span>
#include <string>
#include <vector>

namespace chorus::averaging {

struct weighted_peer {
  int peer;
  double weight;
};

enum class stochastic { row, column, doubly };

// One mixing matrix, sparse: row i lists (j, W_ij) for W_ij != 0, self included.
class mixing_matrix {
 public:
  mixing_matrix() = default;
  explicit mixing_matrix(std::vector<std::vector<weighted_peer>> rows) : rows_(std::move(rows)) {
    columns_.resize(rows_.size());
    for (std::size_t i = 0; i < rows_.size(); ++i)
      for (const weighted_peer& entry : rows_[i])
        columns_[static_cast<std::size_t>(entry.peer)].push_back({static_cast<int>(i), entry.weight});
  }

  int size() const noexcept { return static_cast<int>(rows_.size()); }
  // Whom rank i hears from, and with what weight (self included).
  std::span<const weighted_peer> row(int i) const { return rows_.at(static_cast<std::size_t>(i)); }
  // Whom rank i's model goes to, and with what weight they take it (self included).
  std::span<const weighted_peer> column(int i) const { return columns_.at(static_cast<std::size_t>(i)); }
  double weight(int i, int j) const {
    for (const weighted_peer& entry : row(i))
      if (entry.peer == j) return entry.weight;
    return 0.0;
  }

  std::vector<std::vector<double>> dense() const {
    std::vector<std::vector<double>> matrix(rows_.size(), std::vector<double>(rows_.size(), 0.0));
    for (std::size_t i = 0; i < rows_.size(); ++i)
      for (const weighted_peer& entry : rows_[i]) matrix[i][static_cast<std::size_t>(entry.peer)] += entry.weight;
    return matrix;
  }

 private:
  std::vector<std::vector<weighted_peer>> rows_;
  std::vector<std::vector<weighted_peer>> columns_;
};

namespace detail {

using dense_matrix = std::vector<std::vector<double>>;

inline dense_matrix multiply(const dense_matrix& a, const dense_matrix& b) {
  const std::size_t n = a.size();
  dense_matrix c(n, std::vector<double>(n, 0.0));
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t j = 0; j < n; ++j) c[i][j] += a[i][k] * b[k][j];
  return c;
}

// Largest eigenvalue of a symmetric matrix by cyclic Jacobi rotations
// (robust where power iteration stalls on close eigenvalues).
inline double largest_symmetric_eigenvalue(dense_matrix a) {
  const std::size_t n = a.size();
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0.0;
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t q = p + 1; q < n; ++q) off += a[p][q] * a[p][q];
    if (off < 1e-30) break;
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t q = p + 1; q < n; ++q) {
        if (std::fabs(a[p][q]) < 1e-300) continue;
        const double theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::fabs(theta) + std::sqrt(theta * theta + 1.0));
        const double c = 1.0 / std::sqrt(t * t + 1.0), s = t * c;
        for (std::size_t k = 0; k < n; ++k) {  // A <- A R (columns p, q)
          const double akp = a[k][p], akq = a[k][q];
          a[k][p] = c * akp - s * akq;
          a[k][q] = s * akp + c * akq;
        }
        for (std::size_t k = 0; k < n; ++k) {  // A <- R^T A (rows p, q)
          const double apk = a[p][k], aqk = a[q][k];
          a[p][k] = c * apk - s * aqk;
          a[q][k] = s * apk + c * aqk;
        }
      }
  }
  double largest = 0.0;
  for (std::size_t i = 0; i < n; ++i) largest = std::max(largest, a[i][i]);
  return largest;
}

// ||M - J/n||_2: the factor by which one application shrinks disagreement.
inline double disagreement_norm(dense_matrix m) {
  const std::size_t n = m.size();
  for (auto& row : m)
    for (double& value : row) value -= 1.0 / static_cast<double>(n);
  dense_matrix gram(n, std::vector<double>(n, 0.0));  // M^T M
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t k = 0; k < n; ++k)
      for (std::size_t j = 0; j < n; ++j) gram[i][j] += m[k][i] * m[k][j];
  return std::sqrt(std::max(0.0, largest_symmetric_eigenvalue(std::move(gram))));
}

inline int ceil_log2(int n) {
  int rounds = 0;
  while ((1 << rounds) < n) ++rounds;
  return rounds;
}

}  // namespace detail

class topology {
 public:
  static constexpr double tolerance = 1e-9;

  topology(std::string name, std::vector<mixing_matrix> phases) : name_(std::move(name)), phases_(std::move(phases)) {
    if (phases_.empty()) throw error(errc::invalid_argument, "topology " + name_ + ": no mixing matrix");
    for (const mixing_matrix& phase : phases_)
      if (phase.size() != phases_.front().size())
        throw error(errc::invalid_argument, "topology " + name_ + ": phases of different sizes");
  }

  static topology ring(int n) {
    require_ranks(n, "ring");
    return {"ring", {circulant(n, {0, 1, -1}, 1.0 / 3.0)}};
  }

  static topology torus(int rows, int cols) {
    require_ranks(rows, "torus rows");
    require_ranks(cols, "torus cols");
    const int n = rows * cols;
    std::vector<std::map<int, double>> weights(static_cast<std::size_t>(n));
    for (int r = 0; r < rows; ++r)
      for (int c = 0; c < cols; ++c) {
        auto& row = weights[static_cast<std::size_t>(r * cols + c)];
        for (const auto& [dr, dc] : {std::pair{0, 0}, {1, 0}, {-1, 0}, {0, 1}, {0, -1}})
          row[((r + dr + rows) % rows) * cols + (c + dc + cols) % cols] += 0.2;
      }
    return {"torus " + std::to_string(rows) + "x" + std::to_string(cols), {from_maps(weights)}};
  }

  static topology exponential(int n) {
    require_ranks(n, "exponential");
    std::vector<int> offsets{0};
    for (int hop = 1; hop < n; hop *= 2) offsets.push_back(-hop);
    return {"exponential", {circulant(n, offsets, 1.0 / static_cast<double>(offsets.size()))}};
  }

  static topology one_peer_exponential(int n) {
    require_ranks(n, "one_peer_exponential");
    std::vector<mixing_matrix> phases;
    for (int k = 0; k < detail::ceil_log2(n); ++k) phases.push_back(circulant(n, {0, -(1 << k)}, 0.5));
    if (phases.empty()) phases.push_back(circulant(n, {0}, 1.0));
    return {"one-peer exponential", std::move(phases)};
  }

  static topology fully_connected(int n) {
    require_ranks(n, "fully_connected");
    std::vector<int> offsets(static_cast<std::size_t>(n));
    for (int k = 0; k < n; ++k) offsets[static_cast<std::size_t>(k)] = k;
    return {"fully connected", {circulant(n, offsets, 1.0 / n)}};
  }

  // User weights W[i][j] (what i takes from j), checked: square, finite,
  // non-negative, and rows and/or columns summing to 1 as `required`.
  static topology from_weights(const std::vector<std::vector<double>>& w, stochastic required = stochastic::doubly,
                               std::string name = "user weights") {
    const std::size_t n = w.size();
    require_ranks(static_cast<int>(n), name.c_str());
    std::vector<std::vector<weighted_peer>> rows(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (w[i].size() != n)
        throw error(errc::invalid_argument, name + ": row " + std::to_string(i) + " has " +
                                                std::to_string(w[i].size()) + " entries, the matrix is " +
                                                std::to_string(n) + "x" + std::to_string(n));
      for (std::size_t j = 0; j < n; ++j) {
        if (!std::isfinite(w[i][j]) || w[i][j] < 0)
          throw error(errc::invalid_argument, name + ": weight [" + std::to_string(i) + "][" + std::to_string(j) +
                                                  "] = " + std::to_string(w[i][j]) +
                                                  " is not a finite non-negative number");
        if (w[i][j] != 0) rows[i].push_back({static_cast<int>(j), w[i][j]});
      }
    }
    topology built(std::move(name), {mixing_matrix(std::move(rows))});
    built.require(required);
    return built;
  }

  const std::string& name() const noexcept { return name_; }
  int size() const noexcept { return phases_.front().size(); }
  std::size_t period() const noexcept { return phases_.size(); }
  const mixing_matrix& at(std::size_t round) const noexcept { return phases_[round % phases_.size()]; }

  // The ranks `rank` hears from in any phase, itself aside, ascending: the
  // sources of a window that serves every round.
  std::vector<int> in_neighbours(int rank) const {
    std::vector<int> peers;
    for (const mixing_matrix& phase : phases_)
      for (const weighted_peer& entry : phase.row(rank))
        if (entry.peer != rank) peers.push_back(entry.peer);
    std::sort(peers.begin(), peers.end());
    peers.erase(std::unique(peers.begin(), peers.end()), peers.end());
    return peers;
  }

  bool is_row_stochastic() const { return first_bad_sum(true).empty(); }
  bool is_column_stochastic() const { return first_bad_sum(false).empty(); }
  bool is_doubly_stochastic() const { return is_row_stochastic() && is_column_stochastic(); }

  // Throws invalid_argument naming the first row or column that does not sum to 1.
  void require(stochastic required) const {
    std::string bad;
    if (required != stochastic::column) bad = first_bad_sum(true);
    if (bad.empty() && required != stochastic::row) bad = first_bad_sum(false);
    if (!bad.empty())
      throw error(errc::invalid_argument,
                  "topology " + name_ + " is not " + to_string(required) + " stochastic: " + bad);
  }

  double spectral_gap() const {
    detail::dense_matrix product = phases_.front().dense();
    for (std::size_t p = 1; p < phases_.size(); ++p) product = detail::multiply(phases_[p].dense(), product);
    const double norm = detail::disagreement_norm(std::move(product));
    return 1.0 - std::pow(norm, 1.0 / static_cast<double>(phases_.size()));
  }

 private:
  static const char* to_string(stochastic kind) {
    return kind == stochastic::row ? "row" : kind == stochastic::column ? "column" : "doubly";
  }

  static void require_ranks(int n, const char* what) {
    if (n < 1)
      throw error(errc::invalid_argument, std::string(what) + ": needs at least 1 rank, got " + std::to_string(n));
  }

  // W_{i, i+offset} = weight for each offset; coinciding offsets add up.
  static mixing_matrix circulant(int n, const std::vector<int>& offsets, double weight) {
    std::vector<std::map<int, double>> weights(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i)
      for (int offset : offsets) weights[static_cast<std::size_t>(i)][((i + offset) % n + n) % n] += weight;
    return from_maps(weights);
  }

  static mixing_matrix from_maps(const std::vector<std::map<int, double>>& weights) {
    std::vector<std::vector<weighted_peer>> rows(weights.size());
    for (std::size_t i = 0; i < weights.size(); ++i)
      for (const auto& [peer, weight] : weights[i]) rows[i].push_back({peer, weight});
    return mixing_matrix(std::move(rows));
  }

  std::string first_bad_sum(bool rows) const {
    for (std::size_t p = 0; p < phases_.size(); ++p)
      for (int i = 0; i < size(); ++i) {
        double sum = 0;
        for (const weighted_peer& entry : rows ? phases_[p].row(i) : phases_[p].column(i)) sum += entry.weight;
        if (std::fabs(sum - 1.0) > tolerance)
          return std::string(rows ? "row " : "column ") + std::to_string(i) +
                 (phases_.size() > 1 ? " of phase " + std::to_string(p) : std::string()) + " sums to " +
                 std::to_string(sum);
      }
    return {};
  }

  std::string name_;
  std::vector<mixing_matrix> phases_;
};

}  // namespace chorus::averaging
