// A communicator's members: its rank r -> the transport (world) rank that
// is r. The world communicator's is the identity and keeps only its size:
// a table would cost every rank 4 B per rank of the job (256 KiB at 65,536
// ranks), and a simulation that holds every rank in one process that many
// times over (sim/run.hpp). A group made by split(), without() or with()
// keeps its table.
#pragma once

#include <cstddef>
#include <iterator>
#include <numeric>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace chorus {

class member_list {
 public:
  member_list() = default;
  explicit member_list(std::vector<int> ranks) : ranks_(std::move(ranks)) {}
  static member_list identity(int size) {
    member_list list;
    list.identity_size_ = size;
    return list;
  }

  std::size_t size() const noexcept { return is_identity() ? static_cast<std::size_t>(identity_size_) : ranks_.size(); }
  bool is_identity() const noexcept { return identity_size_ >= 0; }
  int operator[](std::size_t rank) const noexcept { return is_identity() ? static_cast<int>(rank) : ranks_[rank]; }
  int at(std::size_t rank) const {
    if (rank >= size())
      throw std::out_of_range("member_list: rank " + std::to_string(rank) + " of " + std::to_string(size()));
    return (*this)[rank];
  }
  // The rank whose transport rank is `world`; -1 if none is.
  int index_of(int world) const noexcept {
    if (is_identity()) return world >= 0 && world < identity_size_ ? world : -1;
    for (std::size_t rank = 0; rank < ranks_.size(); ++rank)
      if (ranks_[rank] == world) return static_cast<int>(rank);
    return -1;
  }
  std::vector<int> to_vector() const {
    if (!is_identity()) return ranks_;
    std::vector<int> ranks(size());
    std::iota(ranks.begin(), ranks.end(), 0);
    return ranks;
  }

  void push_back(int world) {
    if (is_identity()) *this = member_list(to_vector());
    ranks_.push_back(world);
  }
  void clear() noexcept {
    identity_size_ = -1;
    ranks_.clear();
  }

  class iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = int;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = int;

    iterator() = default;
    iterator(const member_list* list, std::size_t rank) noexcept : list_(list), rank_(rank) {}
    int operator*() const noexcept { return (*list_)[rank_]; }
    iterator& operator++() noexcept {
      ++rank_;
      return *this;
    }
    iterator operator++(int) noexcept { return std::exchange(*this, iterator(list_, rank_ + 1)); }
    bool operator==(const iterator& other) const noexcept { return rank_ == other.rank_; }

   private:
    const member_list* list_ = nullptr;
    std::size_t rank_ = 0;
  };
  iterator begin() const noexcept { return {this, 0}; }
  iterator end() const noexcept { return {this, size()}; }

 private:
  std::vector<int> ranks_;  // when not the identity
  int identity_size_ = -1;  // >= 0: the identity of this many ranks
};

}  // namespace chorus
