// parameters: the trainer's model as the schemes see it, one contiguous span
// of float or a list of spans (one per tensor), never copied into a model
// format of ours. Schemes read and write the trainer's memory through it.
//
//   chorus::averaging::parameters model(std::span<float>(weights));
//   chorus::averaging::parameters layers({w1, b1, w2, b2});  // spans
//
// `flat` views line the tensors up one after another: element k of the
// model is element k of the concatenation. copy_to / copy_from move between
// the tensors and one contiguous buffer (a send buffer, a snapshot), and
// for_each_part walks the tensors next to matching parts of such a buffer.
#pragma once

#include <chorus/core/error.hpp>

#include <algorithm>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

namespace chorus::averaging {

class parameters {
 public:
  parameters() = default;
  parameters(std::span<float> whole) : tensors_{whole}, size_(whole.size()) {}  // NOLINT: implicit on purpose
  parameters(std::vector<std::span<float>> tensors) : tensors_(std::move(tensors)) {  // NOLINT
    for (const auto& tensor : tensors_) size_ += tensor.size();
  }
  parameters(std::initializer_list<std::span<float>> tensors) : parameters(std::vector<std::span<float>>(tensors)) {}

  std::size_t size() const noexcept { return size_; }
  std::span<const std::span<float>> tensors() const noexcept { return tensors_; }

  // f(tensor, part of `flat` at the same offsets), tensor by tensor.
  template <class Flat, class F>
  void for_each_part(std::span<Flat> flat, F&& f) const {
    require_flat_size(flat.size(), "for_each_part");
    std::size_t offset = 0;
    for (const auto& tensor : tensors_) {
      f(tensor, flat.subspan(offset, tensor.size()));
      offset += tensor.size();
    }
  }

  void copy_to(std::span<float> flat) const {
    for_each_part(flat, [](std::span<const float> tensor, std::span<float> part) {
      std::copy(tensor.begin(), tensor.end(), part.begin());
    });
  }
  void copy_from(std::span<const float> flat) const {
    for_each_part(flat, [](std::span<float> tensor, std::span<const float> part) {
      std::copy(part.begin(), part.end(), tensor.begin());
    });
  }
  std::vector<float> snapshot() const {
    std::vector<float> flat(size_);
    copy_to(flat);
    return flat;
  }

  // Throws unless `other` has the same tensor sizes (gradients for these
  // parameters, say).
  void require_same_shape(const parameters& other, const char* what) const {
    bool same = other.tensors_.size() == tensors_.size();
    for (std::size_t t = 0; same && t < tensors_.size(); ++t) same = other.tensors_[t].size() == tensors_[t].size();
    if (!same)
      throw error(errc::invalid_argument, std::string(what) + ": " + std::to_string(other.tensors_.size()) +
                                              " tensors of " + std::to_string(other.size_) + " elements do not match the " +
                                              std::to_string(tensors_.size()) + " tensors of " + std::to_string(size_) +
                                              " parameters");
  }

 private:
  void require_flat_size(std::size_t given, const char* operation) const {
    if (given != size_)
      throw error(errc::invalid_argument, std::string("parameters::") + operation + ": a buffer of " +
                                              std::to_string(given) + " elements for " + std::to_string(size_) +
                                              " parameters");
  }

  std::vector<std::span<float>> tensors_;
  std::size_t size_ = 0;
};

}  // namespace chorus::averaging
