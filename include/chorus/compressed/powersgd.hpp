// PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019): gradients averaged
// through a rank-r approximation, for links too slow for the full gradient.
//
//   chorus::powersgd low_rank({{784, 256}, {1, 256}, {256, 128}, {1, 128}}, {.rank = 2});
//   low_rank.average(comm, gradient_tensors);  // every rank: the same approximate mean
//
// Per gradient matrix M (rows x cols, row-major; a tensor of more
// dimensions as (first, rest), as torch reshapes it), with the error E this
// rank kept and a Q (cols x r) kept from the last step, the same on every
// rank:
//   M += E;  P = M Q;  allreduce(P, avg);  P = orthonormal columns of P
//   (Gram-Schmidt);  Q = M^T P;  allreduce(Q, avg);  M_hat = P Q^T;
//   E = M - M_hat;  the gradient becomes M_hat.
// Q is then the mean of M_i^T P, so M_hat = P P^T mean(M): the mean
// projected on r directions, the same bits on every rank (P and Q come out
// of allreduces). Keeping Q between steps (warm start) makes each step one
// power iteration towards the mean's top r directions; a mean of rank <= r
// (a rank-1 gradient at r = 1) comes through exactly.
//
// Cost per step: two allreduces, of sum(rows r) + the exact tensors'
// elements and of sum(cols r), for all matrices together, instead of one of
// sum(rows cols); compute about 4 rows cols r flops a matrix. Vectors, and
// matrices too small to gain ((rows + cols) r >= rows cols), are averaged
// exactly inside the first allreduce. A Q column that comes out zero (a zero
// gradient) is drawn again, so a step without gradient does not stall the
// ones after it.
#pragma once

#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/random.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace chorus {

// A gradient tensor as a matrix: rows x cols elements (a vector: 1 x n).
struct matrix_shape {
  std::size_t rows = 1;
  std::size_t cols = 0;
  std::size_t elements() const noexcept { return rows * cols; }
};

struct powersgd_options {
  std::size_t rank = 2;        // r
  bool error_feedback = true;  // keep what the approximation lost for the next step
  bool warm_start = true;      // Q from the last step (else drawn afresh each step)
  std::uint64_t seed = 0;      // the first Q: the same on every rank
};

class powersgd {
 public:
  powersgd(std::vector<matrix_shape> shapes, powersgd_options options = {}) : options_(options), random_(options.seed) {
    if (options_.rank == 0) throw error(errc::invalid_argument, "PowerSGD's rank is at least 1", where());
    for (const matrix_shape& shape : shapes) add(shape);
  }

  // Averages `gradients` (one host span per shape, in order) over the
  // communicator's ranks, approximately for the matrices compressed.
  template <class Communicator>
  void average(Communicator& comm, std::span<const std::span<float>> gradients) {
    require_matching(gradients);
    p_.assign(p_floats_, 0.0f);
    for (std::size_t t = 0; t < matrices_.size(); ++t) first_half(matrices_[t], gradients[t]);
    allreduce(comm, std::span<float>(p_), op::avg{});
    q_.assign(q_floats_, 0.0f);
    for (std::size_t t = 0; t < matrices_.size(); ++t) second_half(matrices_[t], gradients[t]);
    allreduce(comm, std::span<float>(q_), op::avg{});
    for (std::size_t t = 0; t < matrices_.size(); ++t) approximate(matrices_[t], gradients[t]);
  }

  // Floats each rank puts into the two allreduces per step.
  std::size_t floats_per_step() const noexcept { return p_floats_ + q_floats_; }
  // Whether tensor t travels as a rank-r approximation (else exactly).
  bool compressed(std::size_t t) const { return matrices_.at(t).low_rank; }
  const powersgd_options& options() const noexcept { return options_; }

 private:
  struct matrix {
    matrix_shape shape;
    bool low_rank = false;
    std::size_t p_at = 0;  // its P (or its exact elements) in p_
    std::size_t q_at = 0;  // its Q in q_
    std::vector<float> q;  // r columns of cols, kept between steps
    std::vector<float> error;
  };

  static error_context where() { return {-1, -1, "powersgd"}; }

  void add(const matrix_shape& shape) {
    matrix m;
    m.shape = shape;
    const std::size_t r = options_.rank;
    m.low_rank = shape.rows > 1 && shape.cols > 1 && (shape.rows + shape.cols) * r < shape.elements();
    m.p_at = p_floats_;
    if (!m.low_rank) {
      p_floats_ += shape.elements();
      matrices_.push_back(std::move(m));
      return;
    }
    p_floats_ += shape.rows * r;
    m.q_at = q_floats_;
    q_floats_ += shape.cols * r;
    m.q.resize(shape.cols * r);
    for (float& value : m.q) value = static_cast<float>(random_.normal());
    if (options_.error_feedback) m.error.assign(shape.elements(), 0.0f);
    matrices_.push_back(std::move(m));
  }

  void require_matching(std::span<const std::span<float>> gradients) const {
    if (gradients.size() != matrices_.size())
      throw error(errc::invalid_argument,
                  std::to_string(gradients.size()) + " gradient tensors for a PowerSGD of " +
                      std::to_string(matrices_.size()) + " shapes",
                  where());
    for (std::size_t t = 0; t < matrices_.size(); ++t)
      if (gradients[t].size() != matrices_[t].shape.elements())
        throw error(errc::invalid_argument,
                    "gradient tensor " + std::to_string(t) + " has " + std::to_string(gradients[t].size()) +
                        " elements, its shape " + std::to_string(matrices_[t].shape.rows) + " x " +
                        std::to_string(matrices_[t].shape.cols) + " has " +
                        std::to_string(matrices_[t].shape.elements()),
                    where());
  }

  // M += E and P = M Q; an exact tensor is copied in as it is. The factors
  // are kept a column after another (P: r columns of rows, Q: r of cols),
  // so every loop below runs over contiguous floats and vectorises.
  void first_half(matrix& m, std::span<float> gradient) {
    float* p = p_.data() + m.p_at;
    if (!m.low_rank) {
      std::copy(gradient.begin(), gradient.end(), p);
      return;
    }
    for (std::size_t k = 0; k < m.error.size(); ++k) gradient[k] += m.error[k];
    if (!options_.warm_start)
      for (float& value : m.q) value = static_cast<float>(random_.normal());
    redraw_zero_columns(m);
    const std::size_t rows = m.shape.rows, cols = m.shape.cols;
    for (std::size_t j = 0; j < options_.rank; ++j)
      for (std::size_t i = 0; i < rows; ++i) p[j * rows + i] = dot(gradient.data() + i * cols, &m.q[j * cols], cols);
  }

  // Orthonormal P, then Q = M^T P; an exact tensor takes its mean.
  void second_half(matrix& m, std::span<float> gradient) {
    float* p = p_.data() + m.p_at;
    if (!m.low_rank) {
      std::copy(p, p + gradient.size(), gradient.begin());
      return;
    }
    const std::size_t rows = m.shape.rows, cols = m.shape.cols;
    orthonormalise(p, rows, options_.rank);
    float* q = q_.data() + m.q_at;
    for (std::size_t j = 0; j < options_.rank; ++j)
      for (std::size_t i = 0; i < rows; ++i)
        add_scaled(q + j * cols, gradient.data() + i * cols, p[j * rows + i], cols);
  }

  // M_hat = P Q^T becomes the gradient; E = M - M_hat; Q is kept.
  void approximate(matrix& m, std::span<float> gradient) {
    if (!m.low_rank) return;
    const std::size_t rows = m.shape.rows, cols = m.shape.cols;
    const float* p = p_.data() + m.p_at;
    const float* q = q_.data() + m.q_at;
    std::copy(q, q + m.q.size(), m.q.begin());
    approximation_.resize(cols);
    for (std::size_t i = 0; i < rows; ++i) {
      std::fill(approximation_.begin(), approximation_.end(), 0.0f);
      for (std::size_t j = 0; j < options_.rank; ++j)
        add_scaled(approximation_.data(), q + j * cols, p[j * rows + i], cols);
      float* row = gradient.data() + i * cols;
      if (!m.error.empty())
        for (std::size_t k = 0; k < cols; ++k) m.error[i * cols + k] = row[k] - approximation_[k];
      std::copy(approximation_.begin(), approximation_.end(), row);
    }
  }

  // sum a[k] b[k] over eight partial sums (they vectorise; one running sum
  // would not, and loses more to rounding).
  static float dot(const float* a, const float* b, std::size_t n) {
    float partial[8] = {};
    std::size_t k = 0;
    for (; k + 8 <= n; k += 8)
      for (std::size_t l = 0; l < 8; ++l) partial[l] += a[k + l] * b[k + l];
    double sum = 0.0;
    for (float value : partial) sum += value;
    for (; k < n; ++k) sum += static_cast<double>(a[k]) * b[k];
    return static_cast<float>(sum);
  }
  static void add_scaled(float* out, const float* in, float scale, std::size_t n) {
    for (std::size_t k = 0; k < n; ++k) out[k] += scale * in[k];
  }

  // Modified Gram-Schmidt on the r columns of P (each `rows` long); a
  // column in the span of those before it becomes zero.
  static void orthonormalise(float* p, std::size_t rows, std::size_t r) {
    for (std::size_t j = 0; j < r; ++j) {
      float* column = p + j * rows;
      for (std::size_t l = 0; l < j; ++l) add_scaled(column, p + l * rows, -dot(column, p + l * rows, rows), rows);
      const double norm = std::sqrt(static_cast<double>(dot(column, column, rows)));
      const auto scale = static_cast<float>(norm > 1e-30 ? 1.0 / norm : 0.0);
      for (std::size_t i = 0; i < rows; ++i) column[i] *= scale;
    }
  }

  // Q is the same on every rank, and so is the generator: every rank draws
  // the same new column.
  void redraw_zero_columns(matrix& m) {
    const std::size_t cols = m.shape.cols;
    for (std::size_t j = 0; j < options_.rank; ++j) {
      const auto column = m.q.begin() + static_cast<std::ptrdiff_t>(j * cols);
      if (std::all_of(column, column + static_cast<std::ptrdiff_t>(cols), [](float v) { return v == 0.0f; }))
        std::generate(column, column + static_cast<std::ptrdiff_t>(cols),
                      [&] { return static_cast<float>(random_.normal()); });
    }
  }

  powersgd_options options_;
  splitmix64 random_;
  std::vector<matrix> matrices_;
  std::size_t p_floats_ = 0;
  std::size_t q_floats_ = 0;
  std::vector<float> p_, q_;          // the two allreduces' buffers
  std::vector<float> approximation_;  // one row of M_hat
};

}  // namespace chorus
