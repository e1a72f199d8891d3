// D-PSGD's round with everything on the device: for a model in device
// memory on a communicator that moves device memory itself (an NCCL
// communicator, which names what it moves through `through()`, or a chorus
// communicator whose UCX moves CUDA memory: the direct path's two questions,
// route/direct_path.hpp), the snapshot, the encoded messages, the decoding
// and the mixing stay in device memory, through the router's local
// arithmetic (a cuda::router given the device kernels), and each round's
// sends and receives carry device buffers (one NCCL group, or UCX's direct
// point-to-point). No host copies. The bits are the host round's: the codec's kernels have
// the CPU codec's bits, and the mixing x += w (theirs - mine) is the same
// three rounded steps (a negation, which is exact, two additions and a
// product).
//
// Cost per round: as neighbour_exchange.hpp, plus per neighbour four passes
// over the model at device bandwidth.
#pragma once

#include <chorus/averaging/parameters.hpp>
#include <chorus/averaging/topology.hpp>
#include <chorus/codec/any_codec.hpp>
#include <chorus/codec/spec.hpp>
#include <chorus/core/error.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace chorus::averaging {

template <class Communicator>
class device_mixing {
 public:
  using request = typename Communicator::request;

  // The router to mix through, or null where the round stays on the host:
  // host tensors, a communicator that moves no device memory (neither NCCL
  // nor a UCX that takes the model's memory for CUDA memory), or a router
  // without the device kernels.
  static memory_router* router_for(Communicator& comm, const parameters& model) {
    const std::span<float>* first = first_tensor(model);
    if (first == nullptr || model.on_host()) return nullptr;
    memory_router* router = routed(*first);
    if (router == nullptr) return nullptr;
    network_memory network;
    if constexpr (requires { comm.through().moves(nullptr); }) {
      if (!comm.through().moves(first->data())) return nullptr;
      network.moved = {memory_kind::host, memory_kind::cuda_device};  // NCCL registers nothing with UCX
    } else {
      network = network_of(comm);
    }
    return router->direct_path(view_of(*first), dtype::float32, op::sum::name, network).direct ? router : nullptr;
  }

  device_mixing(Communicator& comm, parameters model, codec::any_codec wire, memory_router& router)
      : comm_(comm),
        model_(std::move(model)),
        wire_(std::move(wire)),
        router_(router),
        message_bytes_(wire_.encoded_bytes(model_.size())) {}

  // Snapshots the model, encodes it (the snapshot becomes what the
  // neighbours will decode) and queues the round's sends and receives.
  void start(const mixing_matrix& w) {
    on_device([&](local_arithmetic& where) {
      float* mine = floats(snapshot_, where);
      std::size_t offset = 0;
      for (const std::span<float>& tensor : model_.tensors()) {
        if (!tensor.empty()) where.copy(mine + offset, tensor.data(), tensor.size_bytes());
        offset += tensor.size();
      }
      std::byte* outgoing = bytes(outgoing_, where, message_bytes_);
      encode(where, mine, outgoing);
      if (wire_) decode(where, outgoing, mine);
    });
    const int me = comm_.rank();
    const int tag = static_cast<int>(round_++ & 0xffff);
    senders_.clear();
    for (const weighted_peer& from : w.row(me))
      if (from.peer != me) senders_.push_back(from);
    incoming_.resize(senders_.size());
    requests_.clear();
    on_device([&](local_arithmetic& where) {
      for (std::size_t k = 0; k < senders_.size(); ++k)
        requests_.push_back(
            comm_.irecv(std::span(bytes(incoming_[k], where, message_bytes_), message_bytes_), senders_[k].peer, tag));
    });
    const std::span<const std::byte> outgoing(static_cast<const std::byte*>(outgoing_.get()), message_bytes_);
    for (const weighted_peer& to : w.column(me))
      if (to.peer != me) requests_.push_back(comm_.isend(outgoing, to.peer, tag));
  }

  // Waits for the round, then adds W_me,j (x_j - x_me) for each neighbour j,
  // x at the snapshot, to the model, tensor by tensor.
  void finish() {
    comm_.wait_all(std::span<request>(requests_), "neighbour_exchange");
    on_device([&](local_arithmetic& where) {
      const float* mine = floats(snapshot_, where);
      float* theirs = floats(decoded_, where);
      float* step = floats(step_, where);
      for (std::size_t k = 0; k < senders_.size(); ++k) {
        decode(where, static_cast<const std::byte*>(incoming_[k].get()), theirs);
        mix(where, static_cast<float>(senders_[k].weight), theirs, mine, step);
      }
    });
  }

 private:
  static const std::span<float>* first_tensor(const parameters& model) {
    for (const std::span<float>& tensor : model.tensors())
      if (!tensor.empty()) return &tensor;
    return nullptr;
  }
  static routed_buffer view_of(std::span<float> tensor) {
    return {tensor.data(), tensor.size_bytes(), buffer_use::read_write};
  }

  // Runs body(where) on the device, then waits until its steps are done.
  template <class Body>
  void on_device(Body&& body) {
    router_.through_direct(
        view_of(*first_tensor(model_)),
        [&](local_arithmetic& where) {
          body(where);
          where.settle();
        },
        chorus::detail::waiting_on(waiting_));
  }

  // Device memory that lasts from round to round.
  float* floats(std::shared_ptr<void>& held, local_arithmetic& where) {
    return reinterpret_cast<float*>(bytes(held, where, model_.size() * sizeof(float)));
  }
  static std::byte* bytes(std::shared_ptr<void>& held, local_arithmetic& where, std::size_t count) {
    if (!held) held = where.kept(std::max<std::size_t>(count, 1));
    return static_cast<std::byte*>(held.get());
  }

  // The wire's encoding on the device; no codec (or identity): the raw floats.
  void encode(local_arithmetic& where, const float* values, std::byte* out) const {
    with_spec([&](const codec_spec* spec) {
      if (spec != nullptr)
        where.encode(*spec, values, out, model_.size());
      else
        where.copy(out, values, model_.size() * sizeof(float));
    });
  }
  void decode(local_arithmetic& where, const std::byte* in, float* values) const {
    with_spec([&](const codec_spec* spec) {
      if (spec != nullptr)
        where.decode(*spec, in, values, model_.size(), false);
      else
        where.copy(values, in, model_.size() * sizeof(float));
    });
  }
  template <class F>
  void with_spec(F&& f) const {
    if (!wire_) return f(nullptr);
    codec::visit(wire_, [&](const auto& c) {
      if constexpr (codec::describable<std::remove_cvref_t<decltype(c)>>) {
        const codec_spec spec = codec::spec_of(c);
        f(&spec);
      } else {
        f(nullptr);  // identity: its bytes are the floats
      }
    });
  }

  // x += w (theirs - mine), tensor by tensor, in the host's rounding:
  // step = -mine (exact); step += theirs; step *= w; x += step.
  void mix(local_arithmetic& where, float weight, const float* theirs, const float* mine, float* step) {
    const std::size_t n = model_.size();
    where.multiply(mine, step, n, -1.0f);
    where.reduce_into(step, theirs, n, dtype::float32, op::sum::name, false);
    where.multiply(step, step, n, weight);
    std::size_t offset = 0;
    for (const std::span<float>& tensor : model_.tensors()) {
      if (!tensor.empty())
        where.reduce_into(tensor.data(), step + offset, tensor.size(), dtype::float32, op::sum::name, false);
      offset += tensor.size();
    }
  }

  Communicator& comm_;
  parameters model_;
  codec::any_codec wire_;
  memory_router& router_;
  std::size_t message_bytes_;
  detail::local_wait waiting_;
  std::shared_ptr<void> snapshot_, outgoing_, decoded_, step_;
  std::vector<std::shared_ptr<void>> incoming_;
  std::vector<weighted_peer> senders_;
  std::vector<request> requests_;
  std::size_t round_ = 0;
};

}  // namespace chorus::averaging
