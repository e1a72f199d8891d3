// Where an algorithm's local computation runs: its receive window and work copy,
// its reductions, avg's final division, copies, and the moment before the
// transport reads what they wrote. host_compute runs them on the host (scratch.hpp, reduce_local.hpp);
// routed_compute runs them through a router's local_arithmetic, where the
// memory lives (the direct path: device kernels, route/memory_router.hpp),
// and network_exchange hands the transport the addresses it moves.
//
// An algorithm written against these (allreduce_ring.hpp) is the same code
// on both paths, with the same messages on the wire, so a rank on the direct
// path and one on the host path meet in the same ring.
#pragma once

#include <chorus/collective/machinery/reduce_local.hpp>
#include <chorus/collective/machinery/scratch.hpp>
#include <chorus/core/convert.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <array>
#include <cstddef>
#include <span>
#include <type_traits>

namespace chorus::collective {

struct host_compute {
  template <class A>
  std::span<A> window(std::size_t count) const {
    return scratch<A>(count);
  }
  template <class A>
  std::span<A> work(std::size_t count) const {
    return scratch<A>(count, 1);
  }
  // Converts where the types differ: an element type into its accumulator
  // (half and bfloat16 widen to float) and back, rounded once. A span
  // copied onto itself (an in-place call's input) costs nothing.
  template <class From, class To>
  void copy(std::span<const From> from, std::span<To> to) const {
    convert(from, to);
  }
  template <class A, class Op>
  void reduce(std::span<A> target, std::span<const A> arrived, const Op& op, bool incoming_is_lower) const {
    reduce_into(target, arrived, op, incoming_is_lower);
  }
  // target = mine combined with arrived, in one pass: an out-of-place call
  // reads its own contribution where the caller left it (`mine` may be
  // `target` itself).
  template <class A, class Op>
  void reduce(std::span<A> target, std::span<const A> mine, std::span<const A> arrived, const Op& op,
              bool incoming_is_lower) const {
    if (mine.data() == target.data()) return reduce_into(target, arrived, op, incoming_is_lower);
    const std::array<const A*, 2> in_order =
        incoming_is_lower ? std::array{arrived.data(), mine.data()} : std::array{mine.data(), arrived.data()};
    reduce_many(target, std::span<const A* const>(in_order), op);
  }
  template <class A, class Op>
  void finalize(std::span<A> values, const Op& op, std::size_t contributions) const {
    finalize_all(values, op, contributions);
  }
  void settle() const noexcept {}
};

class routed_compute {
 public:
  explicit routed_compute(local_arithmetic& where) noexcept : where_(where) {}

  template <class A>
  std::span<A> window(std::size_t count) const {
    return {static_cast<A*>(where_.scratch(count * sizeof(A), 0)), count};
  }
  template <class A>
  std::span<A> work(std::size_t count) const {
    return {static_cast<A*>(where_.scratch(count * sizeof(A), 1)), count};
  }
  template <class A>
  void copy(std::span<const A> from, std::span<A> to) const {
    if (!from.empty() && from.data() != to.data()) where_.copy(to.data(), from.data(), from.size_bytes());
  }
  template <class A, class Op>
  void reduce(std::span<A> target, std::span<const A> arrived, const Op&, bool incoming_is_lower) const {
    where_.reduce_into(target.data(), arrived.data(), target.size(), dtype_of<A>, op::name_of<Op>(), incoming_is_lower);
  }
  // As host_compute' (the direct path is only ever in place: out-of-place
  // device calls copy on the device first), in two passes.
  template <class A, class Op>
  void reduce(std::span<A> target, std::span<const A> mine, std::span<const A> arrived, const Op& op,
              bool incoming_is_lower) const {
    copy(mine, target);
    reduce(target, arrived, op, incoming_is_lower);
  }
  template <class A, class Op>
  void finalize(std::span<A> values, const Op&, std::size_t contributions) const {
    where_.finalize(values.data(), values.size(), dtype_of<A>, op::name_of<Op>(), contributions);
  }
  void settle() const { where_.settle(); }

 private:
  local_arithmetic& where_;
};

// An exchange (exchange.hpp) whose sends and receives go to the transport
// at the addresses `where` names for them.
template <class X>
class network_exchange {
 public:
  using request = typename X::request;

  network_exchange(X& inner, const local_arithmetic& where) noexcept : inner_(inner), where_(where) {}

  int rank() const noexcept { return inner_.rank(); }
  int size() const noexcept { return inner_.size(); }
  auto phase(std::uint64_t count, std::string_view name) { return inner_.phase(count, name); }
  std::uint64_t steps_left() const noexcept { return inner_.steps_left(); }
  void finish_receive(request& receive, std::size_t bytes) { inner_.finish_receive(receive, bytes); }
  void wait_all(std::span<request> requests) { inner_.wait_all(requests); }

  template <class A>
  request isend(std::span<const A> data, int peer, std::uint32_t step) {
    return inner_.isend(on_network(where_, data), peer, step);
  }
  template <class A>
  request irecv(std::span<A> data, int peer, std::uint32_t step) {
    return inner_.irecv(on_network(where_, data), peer, step);
  }
  template <class A>
  void send(std::span<const A> data, int peer, std::uint32_t step) {
    inner_.send(on_network(where_, data), peer, step);
  }
  template <class A>
  void recv(std::span<A> data, int peer, std::uint32_t step) {
    inner_.recv(on_network(where_, data), peer, step);
  }
  template <class A>
  void sendrecv(std::span<const A> out, int to, std::span<A> in, int from, std::uint32_t step) {
    inner_.sendrecv(on_network(where_, out), to, on_network(where_, in), from, step);
  }

 private:
  X& inner_;
  const local_arithmetic& where_;
};

}  // namespace chorus::collective
