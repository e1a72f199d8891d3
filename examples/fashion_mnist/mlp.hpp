// A multi-layer perceptron 784-256-128-10 (ReLU, softmax cross-entropy) in
// plain C++: all parameters in one contiguous vector, handed to the
// averaging schemes as one span per tensor. The GEMMs are the i-k-j loops
// over restrict pointers that the compiler vectorises.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace fashion_mnist {

// C[m x n] (+)= A[m x k] B[k x n]
inline void gemm(std::size_t m, std::size_t n, std::size_t k, const float* __restrict a, const float* __restrict b,
                 float* __restrict c, bool accumulate) {
  if (!accumulate) std::fill(c, c + m * n, 0.0f);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p) {
      const float scale = a[i * k + p];
      const float* __restrict row = b + p * n;
      float* __restrict out = c + i * n;
      for (std::size_t j = 0; j < n; ++j) out[j] += scale * row[j];
    }
}

// C[k x n] = A[m x k]^T B[m x n]   (weight gradients)
inline void gemm_at_b(std::size_t m, std::size_t n, std::size_t k, const float* __restrict a, const float* __restrict b,
                      float* __restrict c) {
  std::fill(c, c + k * n, 0.0f);
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p) {
      const float scale = a[i * k + p];
      const float* __restrict row = b + i * n;
      float* __restrict out = c + p * n;
      for (std::size_t j = 0; j < n; ++j) out[j] += scale * row[j];
    }
}

// C[m x k] = A[m x n] B[k x n]^T   (gradients to the layer below)
inline void gemm_a_bt(std::size_t m, std::size_t n, std::size_t k, const float* __restrict a, const float* __restrict b,
                      float* __restrict c) {
  for (std::size_t i = 0; i < m; ++i)
    for (std::size_t p = 0; p < k; ++p) {
      const float* __restrict x = a + i * n;
      const float* __restrict y = b + p * n;
      float sum = 0.0f;
      for (std::size_t j = 0; j < n; ++j) sum += x[j] * y[j];
      c[i * k + p] = sum;
    }
}

class mlp {
 public:
  static constexpr std::array<std::size_t, 4> widths{784, 256, 128, 10};
  static constexpr std::size_t layers = widths.size() - 1;

  explicit mlp(std::uint64_t seed) : values_(parameter_count()), gradients_(parameter_count()) {
    std::mt19937_64 random(seed);
    for (std::size_t l = 0; l < layers; ++l) {  // He initialisation, zero biases
      std::normal_distribution<float> normal(0.0f, std::sqrt(2.0f / static_cast<float>(widths[l])));
      for (float& w : weights(values_, l)) w = normal(random);
    }
  }

  static std::size_t parameter_count() {
    std::size_t count = 0;
    for (std::size_t l = 0; l < layers; ++l) count += widths[l] * widths[l + 1] + widths[l + 1];
    return count;
  }

  // One span per tensor (W1, b1, W2, b2, W3, b3), over `values` or the gradients.
  std::vector<std::span<float>> tensors() { return split(values_); }
  std::vector<std::span<float>> gradient_tensors() { return split(gradients_); }
  std::span<float> values() { return values_; }
  // Each tensor's shape as (rows, cols), in the order of tensors(): a
  // weight is inputs x outputs (row-major), a bias 1 x outputs.
  static std::vector<std::array<std::size_t, 2>> tensor_shapes() {
    std::vector<std::array<std::size_t, 2>> shapes;
    for (std::size_t l = 0; l < layers; ++l) {
      shapes.push_back({widths[l], widths[l + 1]});
      shapes.push_back({1, widths[l + 1]});
    }
    return shapes;
  }

  // Mean cross-entropy over the batch; gradients into gradient_tensors().
  float train_batch(std::span<const float> images, std::span<const std::uint8_t> labels) {
    const std::size_t batch = labels.size();
    forward(values_, images, batch);
    std::vector<float> delta = activations_.back();  // softmax - one-hot, / batch
    float loss = 0.0f;
    for (std::size_t i = 0; i < batch; ++i) {
      loss -= std::log(std::max(delta[i * 10 + labels[i]], 1e-12f));
      delta[i * 10 + labels[i]] -= 1.0f;
    }
    for (float& d : delta) d /= static_cast<float>(batch);
    for (std::size_t l = layers; l-- > 0;) {
      const std::vector<float>& input = activations_[l];
      gemm_at_b(batch, widths[l + 1], widths[l], input.data(), delta.data(), weights(gradients_, l).data());
      std::span<float> bias_gradient = biases(gradients_, l);
      std::fill(bias_gradient.begin(), bias_gradient.end(), 0.0f);
      for (std::size_t i = 0; i < batch; ++i)
        for (std::size_t j = 0; j < widths[l + 1]; ++j) bias_gradient[j] += delta[i * widths[l + 1] + j];
      if (l == 0) break;
      std::vector<float> below(batch * widths[l]);
      gemm_a_bt(batch, widths[l + 1], widths[l], delta.data(), weights(values_, l).data(), below.data());
      for (std::size_t k = 0; k < below.size(); ++k) below[k] = input[k] > 0.0f ? below[k] : 0.0f;  // ReLU'
      delta = std::move(below);
    }
    return loss / static_cast<float>(batch);
  }

  // (correct predictions, summed loss) of the model in `parameters` on a split.
  std::pair<std::size_t, double> evaluate(std::span<const float> parameters, std::span<const float> images,
                                          std::span<const std::uint8_t> labels) {
    constexpr std::size_t chunk = 500;
    std::size_t correct = 0;
    double loss = 0;
    for (std::size_t first = 0; first < labels.size(); first += chunk) {
      const std::size_t batch = std::min(chunk, labels.size() - first);
      forward(parameters, images.subspan(first * widths[0], batch * widths[0]), batch);
      const std::vector<float>& p = activations_.back();
      for (std::size_t i = 0; i < batch; ++i) {
        const float* row = p.data() + i * 10;
        correct += static_cast<std::size_t>(std::max_element(row, row + 10) - row) == labels[first + i];
        loss -= std::log(std::max(row[labels[first + i]], 1e-12f));
      }
    }
    return {correct, loss};
  }

 private:
  static std::size_t offset(std::size_t l) {
    std::size_t at = 0;
    for (std::size_t i = 0; i < l; ++i) at += widths[i] * widths[i + 1] + widths[i + 1];
    return at;
  }
  template <class V>
  static std::span<V> weights(std::span<V> all, std::size_t l) {
    return all.subspan(offset(l), widths[l] * widths[l + 1]);
  }
  template <class V>
  static std::span<V> biases(std::span<V> all, std::size_t l) {
    return all.subspan(offset(l) + widths[l] * widths[l + 1], widths[l + 1]);
  }
  static std::span<float> weights(std::vector<float>& all, std::size_t l) { return weights(std::span<float>(all), l); }
  static std::span<float> biases(std::vector<float>& all, std::size_t l) { return biases(std::span<float>(all), l); }

  std::vector<std::span<float>> split(std::vector<float>& all) {
    std::vector<std::span<float>> parts;
    for (std::size_t l = 0; l < layers; ++l) {
      parts.push_back(weights(all, l));
      parts.push_back(biases(all, l));
    }
    return parts;
  }

  // Activations per layer (inputs included); the last holds softmax outputs.
  void forward(std::span<const float> parameters, std::span<const float> images, std::size_t batch) {
    activations_.resize(layers + 1);
    activations_[0].assign(images.begin(), images.end());
    for (std::size_t l = 0; l < layers; ++l) {
      std::vector<float>& out = activations_[l + 1];
      out.resize(batch * widths[l + 1]);
      const std::span<const float> w = weights(parameters, l), b = biases(parameters, l);
      for (std::size_t i = 0; i < batch; ++i)
        std::copy(b.begin(), b.end(), out.begin() + static_cast<std::ptrdiff_t>(i * widths[l + 1]));
      gemm(batch, widths[l + 1], widths[l], activations_[l].data(), w.data(), out.data(), true);
      if (l + 1 < layers) {
        for (float& v : out) v = std::max(v, 0.0f);
      } else {
        for (std::size_t i = 0; i < batch; ++i) softmax(std::span<float>(out).subspan(i * 10, 10));
      }
    }
  }

  static void softmax(std::span<float> row) {
    const float top = *std::max_element(row.begin(), row.end());
    float sum = 0.0f;
    for (float& v : row) sum += (v = std::exp(v - top));
    for (float& v : row) v /= sum;
  }

  std::vector<float> values_;
  std::vector<float> gradients_;
  std::vector<std::vector<float>> activations_;
};

}  // namespace fashion_mnist
