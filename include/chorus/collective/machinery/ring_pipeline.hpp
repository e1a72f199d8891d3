// The one ring pipeline: every ring in chorus (allreduce, reduce_scatter,
// allgather, and the compressed allreduces) is these two passes over a
// ring_geometry.
//
// - reduce_hops: at each hop a block arrives from the left neighbour one
//   segment at a time, through a window of `depth` receive slots; the
//   caller's combine(range, arrived) folds each segment into its own copy
//   (reduce, or decode-add-encode) and returns the bytes to pass right,
//   which go out at once, so the transfer of segment k+1 overlaps the
//   combining of segment k.
// - gather_hops: at each hop a finished block arrives from the left straight
//   into its place, each segment forwarded right as soon as it lands (the
//   last hop forwards nothing), then the caller's arrived(range) runs.
//
// Block b of the ring arrives at hop h of a pass started at block `start`
// as block start-1-h: each rank works one block behind its left neighbour.
// Cost per hop: alpha + block/segments beta per segment, pipelined, so a
// pass of H hops takes about H alpha + H block beta + segment beta; scratch
// is depth x segment for reduce_hops and none for gather_hops.
#pragma once

#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/collective/machinery/ring_geometry.hpp>
#include <chorus/comm/tag.hpp>
#include <chorus/record/trace.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <type_traits>
#include <vector>

namespace chorus::collective {

template <class X>
class ring_pipeline {
 public:
  using request = typename X::request;

  // `steps` is the phase of geometry.steps() steps the ring reserved.
  ring_pipeline(X& ex, const ring_geometry& geometry, tag::phase steps, std::size_t depth)
      : ex_(ex),
        geometry_(geometry),
        steps_(steps),
        depth_(std::max<std::size_t>(1, std::min(depth, geometry.segments_per_block()))),
        left_((ex.rank() - 1 + ex.size()) % ex.size()),
        right_((ex.rank() + 1) % ex.size()) {}

  std::size_t depth() const noexcept { return depth_; }

  // Sends every segment of `block` right as hop `hop`: message(range) gives
  // the segment's bytes just before it goes (so encoding overlaps sending).
  template <class Message>
  void send_block(int block, std::size_t hop, Message&& message) {
    block = geometry_.block_of(block);
    for (std::size_t k = 0; k < geometry_.pieces(block); ++k) send(message(geometry_.piece(block, k)), hop, k);
  }

  // Sends block `start` (own(range) gives each segment) at hop `first_hop`,
  // then runs `hops` hops in which blocks start-1, start-2, ... arrive.
  // window: depth() slots of `slot` units; wire(range) is a segment's size
  // in units. combine(range, std::span<const T> arrived, bool last_hop)
  // returns what to send right at the next hop; after the last hop it is
  // sent only if `forward_last` (an allreduce's first gather hop).
  template <class T, class Own, class Wire, class Combine>
  void reduce_hops(int start, std::size_t first_hop, std::size_t hops, Own&& own, std::span<T> window, std::size_t slot,
                   Wire&& wire, Combine&& combine, bool forward_last) {
    std::vector<request> receives(depth_);
    for (std::size_t h = 0; h < hops; ++h) {
      const record::phase phase("ring reduce hop");
      const int block = geometry_.block_of(start - 1 - static_cast<int>(h));
      const std::size_t hop = first_hop + h, count = geometry_.pieces(block);
      const bool last = h + 1 == hops;
      const auto slot_for = [&](std::size_t k) {
        return window.subspan((k % depth_) * slot, wire(geometry_.piece(block, k)));
      };
      const auto post = [&](std::size_t k) { receives[k % depth_] = ex_.irecv(slot_for(k), left_, step(hop, k)); };
      for (std::size_t k = 0; k < std::min(depth_, count); ++k) post(k);
      if (h == 0) send_block(start, first_hop, own);  // after posting: the left neighbour sends now too
      for (std::size_t k = 0; k < count; ++k) {
        const std::span<T> arrived = slot_for(k);
        ex_.finish_receive(receives[k % depth_], arrived.size_bytes());
        const auto out = combine(geometry_.piece(block, k), std::span<const T>(arrived), last);
        if (k + depth_ < count) post(k + depth_);
        if (!last || forward_last) send(out, hop + 1, k);
      }
    }
  }

  // `hops` hops from hop `first_hop` in which blocks start-1, start-2, ...
  // arrive straight into place(range) (a span the segment's size), each
  // segment forwarded right but at the last hop, then arrived(range). Every
  // hop's receives are posted first (each has its own place, so none waits
  // for a window); then, if `send_own`, block `start` leaves from its place.
  template <class Place, class Arrived>
  void gather_hops(int start, std::size_t first_hop, std::size_t hops, Place&& place, Arrived&& arrived,
                   bool send_own) {
    const auto block_at = [&](std::size_t h) { return geometry_.block_of(start - 1 - static_cast<int>(h)); };
    std::vector<request> arriving;
    for (std::size_t h = 0; h < hops; ++h)
      for (std::size_t k = 0; k < geometry_.pieces(block_at(h)); ++k)
        arriving.push_back(ex_.irecv(place(geometry_.piece(block_at(h), k)), left_, step(first_hop + h, k)));
    if (send_own) send_block(start, first_hop, place);
    for (std::size_t h = 0, index = 0; h < hops; ++h) {
      const record::phase phase("ring gather hop");
      for (std::size_t k = 0; k < geometry_.pieces(block_at(h)); ++k, ++index) {
        const range r = geometry_.piece(block_at(h), k);
        ex_.finish_receive(arriving[index], place(r).size_bytes());
        if (h + 1 < hops) send(place(r), first_hop + h + 1, k);
        arrived(r);
      }
    }
  }

  // Waits for every send; call once, after the last pass.
  void finish() { ex_.wait_all(sends_); }

 private:
  std::uint32_t step(std::size_t hop, std::size_t k) const { return steps_(geometry_.step(hop, k)); }

  template <class Span>
  void send(const Span& bytes, std::size_t hop, std::size_t k) {
    using T = std::remove_const_t<typename Span::element_type>;
    sends_.push_back(ex_.isend(std::span<const T>(bytes), right_, step(hop, k)));
  }

  X& ex_;
  const ring_geometry& geometry_;
  tag::phase steps_;
  std::size_t depth_;
  int left_, right_;
  std::vector<request> sends_;
};

}  // namespace chorus::collective
