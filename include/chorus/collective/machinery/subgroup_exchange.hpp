// subgroup_exchange: one call's exchange (exchange.hpp) seen by a subset of
// its ranks, so that any algorithm runs among them as if they were the
// communicator: rank() and size() are places in `members`, peers are
// mapped to the call's ranks, and phases come from the call's own step
// space. Every rank of the call reserves the same phases in the same order,
// so groups that run side by side (the hierarchical algorithms' one group
// per local rank) share steps without sharing a tag: the sender differs.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::collective {

template <class X>
class subgroup_exchange {
 public:
  using request = typename X::request;

  // `members`: ranks of `inner`, this rank among them.
  subgroup_exchange(X& inner, std::span<const int> members) : inner_(inner), members_(members.begin(), members.end()) {
    while (members_[static_cast<std::size_t>(rank_)] != inner.rank()) ++rank_;
  }

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return static_cast<int>(members_.size()); }
  std::string_view operation() const noexcept { return inner_.operation(); }
  auto phase(std::uint64_t count, std::string_view name) { return inner_.phase(count, name); }
  std::uint64_t steps_left() const noexcept { return inner_.steps_left(); }
  void finish_receive(request& receive, std::size_t bytes) { inner_.finish_receive(receive, bytes); }
  void wait_all(std::span<request> requests) { inner_.wait_all(requests); }

  template <class A>
  request isend(std::span<const A> data, int peer, std::uint32_t step) {
    return inner_.isend(data, member(peer), step);
  }
  template <class A>
  request irecv(std::span<A> data, int peer, std::uint32_t step) {
    return inner_.irecv(data, member(peer), step);
  }
  template <class A>
  void send(std::span<const A> data, int peer, std::uint32_t step) {
    inner_.send(data, member(peer), step);
  }
  template <class A>
  void recv(std::span<A> data, int peer, std::uint32_t step) {
    inner_.recv(data, member(peer), step);
  }
  template <class A>
  void sendrecv(std::span<const A> out, int to, std::span<A> in, int from, std::uint32_t step) {
    inner_.sendrecv(out, member(to), in, member(from), step);
  }

 private:
  int member(int peer) const { return members_.at(static_cast<std::size_t>(peer)); }

  X& inner_;
  std::vector<int> members_;
  int rank_ = 0;
};

}  // namespace chorus::collective
