// Compressed allgather and broadcast, for exchanging models: every rank's
// `mine` is encoded once, the bytes travel through the plain collective, and
// every rank (the sender included) decodes the same bytes, so all ranks hold
// the same values. Error per element: the codec's bound at that element.
//
//   chorus::allgather(comm, my_params, all_params, chorus::codec::bf16{});
//   chorus::broadcast(comm, params, 0, chorus::codec::fp16{});
//
// Cost: the plain collective's on the encoded size, plus one encode and n
// decodes (allgather) or one decode (broadcast) per rank.
//
// Device buffers: on the direct path (a UCX that moves CUDA memory, and
// device kernels given to the router) the encoding and decoding run on the
// device and the encoded bytes go through the plain collective's own direct
// path; otherwise staged.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/collective/allgather/allgather.hpp>
#include <chorus/collective/broadcast/broadcast.hpp>
#include <chorus/collective/machinery/arguments.hpp>
#include <chorus/compressed/codec_compute.hpp>
#include <chorus/record/call.hpp>
#include <chorus/route/direct_path.hpp>
#include <chorus/route/memory_router.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <string_view>

namespace chorus {

namespace compressed {

// The two collectives, their local computation given (codec_compute.hpp). The
// encoded bytes go through the plain front door, which routes them again
// when they are device scratch.
template <class Communicator, class Compute>
void allgather_with(Communicator& comm, std::span<const float> mine, std::span<float> all, const Compute& compute) {
  const auto n = static_cast<std::size_t>(comm.size());
  collective::check_output(mine, all, mine.size() * n, comm.transport().rank(), "compressed allgather",
                           collective::in_place_form::input_at(mine.size() * static_cast<std::size_t>(comm.rank())));
  const std::size_t each = compute.codec().encoded_bytes(mine.size());
  const std::span<std::byte> encoded = compute.bytes(scratch_for::gathered, each * n);
  compute.encode(mine, encoded.subspan(each * static_cast<std::size_t>(comm.rank()), each), 0, 0, mine.size());
  compute.settle();
  allgather(comm, as_octets(encoded));
  for (std::size_t r = 0; r < n; ++r)
    compute.decode(encoded.subspan(each * r, each), all.subspan(r * mine.size(), mine.size()));
}

template <class Communicator, class Compute>
void broadcast_with(Communicator& comm, std::span<float> data, int root, const Compute& compute) {
  collective::check_root(root, comm.size(), comm.transport().rank(), "compressed broadcast");
  const std::span<std::byte> encoded = compute.bytes(scratch_for::gathered, compute.codec().encoded_bytes(data.size()));
  if (comm.rank() == root) compute.encode(data, encoded, 0, 0, data.size());
  compute.settle();
  broadcast(comm, as_octets(encoded), root);
  compute.decode(encoded, data);
}

}  // namespace compressed

// all[r * mine.size() + i] = decode(encode(rank r's mine))[i].
template <class Communicator, codec::codec Codec>
void allgather(Communicator& comm, std::span<const float> mine, std::span<float> all, const Codec& c) {
  const record::recorded_call recorded(record::recorder_of(comm), record::collective("compressed_allgather", mine));
  const auto n = static_cast<std::size_t>(comm.size());
  if (memory_router* router = routed(mine, all)) {
    const std::span<float> output = all.first(std::min(all.size(), mine.size() * n));
    if (compressed::run_codec_direct(
            *router, comm, "compressed allgather",
            {{mine.data(), mine.size_bytes(), buffer_use::read},
             {output.data(), output.size_bytes(), buffer_use::write}},
            c, [&](const auto& compute) { compressed::allgather_with(comm, mine, all, compute); }))
      return;
    return through_host(
        *router, comm, [&](std::span<const float> in, std::span<float> out) { allgather(comm, in, out, c); },
        staged(mine, buffer_use::read), staged(output, buffer_use::write));
  }
  compressed::allgather_with(comm, mine, all, compressed::host_codec_compute<const Codec>(c));
}

// data = decode(encode(root's data)) on every rank, the root included.
template <class Communicator, codec::codec Codec>
void broadcast(Communicator& comm, std::span<float> data, int root, const Codec& c) {
  const record::recorded_call recorded(record::recorder_of(comm),
                                       record::collective("compressed_broadcast", data, {}, root));
  if (memory_router* router = routed(data)) {
    if (compressed::run_codec_direct(
            *router, comm, "compressed broadcast", {{data.data(), data.size_bytes(), buffer_use::read_write}}, c,
            [&](const auto& compute) { compressed::broadcast_with(comm, data, root, compute); }))
      return;
    return through_host(
        *router, comm, [&](std::span<float> host) { broadcast(comm, host, root, c); },
        staged(data, buffer_use::read_write));  // the root's data is decoded too
  }
  compressed::broadcast_with(comm, data, root, compressed::host_codec_compute<const Codec>(c));
}

}  // namespace chorus
