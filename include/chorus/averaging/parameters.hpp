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

#include <chorus/core/env.hpp>
#include <chorus/core/error.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace chorus::averaging {

namespace detail {
// Waits for the copies of device tensors (local work, no network): yields
// until they are done, at most CHORUS_TIMEOUT (default 180 s).
struct local_wait {
  template <class Done>
  void poll_until(Done&& done, std::string_view operation) const {
    const auto limit = env::get_duration("CHORUS_TIMEOUT").value_or(std::chrono::seconds(180));
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (std::chrono::steady_clock::now() >= deadline)
        throw error(errc::timeout, "device copies did not finish within CHORUS_TIMEOUT",
                    {-1, -1, std::string(operation)});
      std::this_thread::yield();
    }
  }
};
}  // namespace detail

class parameters {
 public:
  parameters() = default;
  parameters(std::span<float> whole) : tensors_{whole}, size_(whole.size()) {}        // NOLINT: implicit on purpose
  parameters(std::vector<std::span<float>> tensors) : tensors_(std::move(tensors)) {  // NOLINT
    for (const auto& tensor : tensors_) size_ += tensor.size();
  }
  parameters(std::initializer_list<std::span<float>> tensors) : parameters(std::vector<std::span<float>>(tensors)) {}

  std::size_t size() const noexcept { return size_; }
  std::span<const std::span<float>> tensors() const noexcept { return tensors_; }

  // f(tensor, part of `flat` at the same offsets), tensor by tensor. A
  // tensor in device memory (a router installed, route/memory_router.hpp)
  // reaches f as a host copy, copied back after f.
  template <class Flat, class F>
  void for_each_part(std::span<Flat> flat, F&& f) const {
    require_flat_size(flat.size(), "for_each_part");
    detail::local_wait waiting;
    std::size_t offset = 0;
    for (const auto& tensor : tensors_) {
      const std::span<Flat> part = flat.subspan(offset, tensor.size());
      if (memory_router* router = routed(tensor))
        through_host(
            *router, waiting, [&](std::span<float> host) { f(host, part); }, staged(tensor, buffer_use::read_write));
      else
        f(tensor, part);
      offset += tensor.size();
    }
  }

  void copy_to(std::span<float> flat) const {
    require_flat_size(flat.size(), "copy_to");
    detail::local_wait waiting;
    std::size_t offset = 0;
    for (const auto& tensor : tensors_) {
      copy_elements(waiting, tensor.data(), tensor.size(), flat.data() + offset);
      offset += tensor.size();
    }
  }
  void copy_from(std::span<const float> flat) const {
    require_flat_size(flat.size(), "copy_from");
    detail::local_wait waiting;
    std::size_t offset = 0;
    for (const auto& tensor : tensors_) {
      copy_elements(waiting, flat.data() + offset, tensor.size(), tensor.data());
      offset += tensor.size();
    }
  }
  std::vector<float> snapshot() const {
    std::vector<float> flat(size_);
    copy_to(flat);
    return flat;
  }

  // Whether every tensor is host memory the host may touch directly (no
  // router installed, or it says so); schemes and optimisers that
  // dereference tensors() check it.
  bool on_host() const noexcept {
    for (const auto& tensor : tensors_)
      if (routed(tensor) != nullptr) return false;
    return true;
  }
  void require_on_host(const char* user) const {
    if (!on_host())
      throw error(errc::invalid_argument, std::string(user) +
                                              " works on host memory; these parameters are device memory (use the "
                                              "trainer's own device code for this step)");
  }

  // Throws unless `other` has the same tensor sizes (gradients for these
  // parameters, say).
  void require_same_shape(const parameters& other, const char* what) const {
    bool same = other.tensors_.size() == tensors_.size();
    for (std::size_t t = 0; same && t < tensors_.size(); ++t) same = other.tensors_[t].size() == tensors_[t].size();
    if (!same)
      throw error(errc::invalid_argument, std::string(what) + ": " + std::to_string(other.tensors_.size()) +
                                              " tensors of " + std::to_string(other.size_) +
                                              " elements do not match the " + std::to_string(tensors_.size()) +
                                              " tensors of " + std::to_string(size_) + " parameters");
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
