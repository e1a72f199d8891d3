// One collective call's view of the communicator: its sequence number, and
// typed sends/receives whose wire tag is (sequence, step). Receives check the
// size that arrived, so ranks that disagree on a count get a mismatch error
// instead of silently short data. Made only while no asynchronous scheme
// has messages waiting to be merged across the group (pending_merges.hpp).
#pragma once

#include <chorus/comm/communicator.hpp>
#include <chorus/core/error.hpp>

#include <array>
#include <span>
#include <string>
#include <string_view>

namespace chorus::collective {

template <class Communicator>
class exchange {
 public:
  using request = typename Communicator::request;

  exchange(Communicator& comm, std::string_view operation)
      : comm_(comm), sequence_(merged_then_next(comm, operation)), operation_(operation) {}

  Communicator& comm() const noexcept { return comm_; }
  int rank() const noexcept { return comm_.rank(); }
  int size() const noexcept { return comm_.size(); }
  std::string_view operation() const noexcept { return operation_; }

  template <class A>
  request isend(std::span<const A> data, int peer, std::uint32_t step) {
    return comm_.isend_bytes(std::as_bytes(data), peer, tag(step));
  }
  template <class A>
  request irecv(std::span<A> data, int peer, std::uint32_t step) {
    return comm_.irecv_bytes(std::as_writable_bytes(data), peer, tag(step));
  }

  void wait_all(std::span<request> requests) { comm_.wait_all(requests, operation_); }

  // Reserves the next `count` steps of this call for one phase of the
  // algorithm (comm/tag.hpp). Every rank must reserve the same phases in the
  // same order, including phases it takes no part in (a folded rank that
  // sits out still reserves the halving rounds it skips, or reserves them
  // after the phases it shares), so a step means the same on every rank.
  tag::phase phase(std::uint64_t count, std::string_view name) {
    if (!steps_.fits(count))
      throw error(errc::invalid_argument,
                  "phase '" + std::string(name) + "' needs " + std::to_string(count) + " wire-tag steps, but only " +
                      std::to_string(std::uint64_t{tag::max_step} + 1 - steps_.used()) + " of " +
                      std::to_string(std::uint64_t{tag::max_step} + 1) + " are left in this call (" +
                      std::to_string(size()) + " ranks)",
                  {comm_.transport().rank(), -1, std::string(operation_)});
    return steps_.reserve(static_cast<std::uint32_t>(count), name);
  }

  // Steps left for further phases: a pipelined algorithm sizes its segments by it.
  std::uint64_t steps_left() const noexcept { return std::uint64_t{tag::max_step} + 1 - steps_.used(); }

  // Waits for a receive and checks that exactly `bytes` arrived.
  void finish_receive(request& receive, std::size_t bytes) {
    comm_.wait(receive, operation_);
    comm_.expect_bytes(receive, bytes, operation_);
  }

  // Sends `out` to `to` and receives `in` from `from` at the same time.
  template <class A>
  void sendrecv(std::span<const A> out, int to, std::span<A> in, int from, std::uint32_t step) {
    std::array<request, 2> pair{irecv(in, from, step), isend(out, to, step)};
    wait_all(pair);
    comm_.expect_bytes(pair[0], in.size_bytes(), operation_);
  }
  template <class A>
  void send(std::span<const A> out, int to, std::uint32_t step) {
    request handle = isend(out, to, step);
    comm_.wait(handle, operation_);
  }
  template <class A>
  void recv(std::span<A> in, int from, std::uint32_t step) {
    request handle = irecv(in, from, step);
    finish_receive(handle, in.size_bytes());
  }

 private:
  static std::uint32_t merged_then_next(Communicator& comm, std::string_view operation) {
    comm.require_merged(operation);
    return comm.next_sequence();
  }

  transport::tag_t tag(std::uint32_t step) const {
    if (step > tag::max_step)
      throw error(errc::invalid_argument,
                  "step " + std::to_string(step) + " does not fit in the wire tag; use larger segments",
                  {comm_.transport().rank(), -1, std::string(operation_)});
    return comm_.wire_tag(sequence_, step);
  }

  Communicator& comm_;
  std::uint32_t sequence_;
  std::string_view operation_;
  tag::step_ranges steps_;
};

}  // namespace chorus::collective
