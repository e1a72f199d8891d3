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
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/collective/allgather.hpp>
#include <chorus/collective/arguments.hpp>
#include <chorus/collective/broadcast.hpp>
#include <chorus/core/memory_router.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace chorus {

namespace compressed {

inline std::span<std::uint8_t> as_octets(std::span<std::byte> bytes) {
  return {reinterpret_cast<std::uint8_t*>(bytes.data()), bytes.size()};
}

}  // namespace compressed

// all[r * mine.size() + i] = decode(encode(rank r's mine))[i].
template <class Communicator, codec::codec Codec>
void allgather(Communicator& comm, std::span<const float> mine, std::span<float> all, const Codec& c) {
  const auto n = static_cast<std::size_t>(comm.size());
  if (memory_router* router = routed(mine, all))
    return through_host(
        *router, comm, [&](std::span<const float> in, std::span<float> out) { allgather(comm, in, out, c); },
        staged(mine, buffer_use::read), staged(all.first(std::min(all.size(), mine.size() * n)), buffer_use::write));
  collective::check_output(mine, all, mine.size() * n, comm.transport().rank(), "compressed allgather");
  const std::size_t each = c.encoded_bytes(mine.size());
  std::vector<std::byte> encoded(each * n);
  c.encode(mine, std::span(encoded).subspan(each * static_cast<std::size_t>(comm.rank()), each));
  allgather(comm, compressed::as_octets(encoded));
  for (std::size_t r = 0; r < n; ++r)
    c.decode(std::span<const std::byte>(encoded).subspan(each * r, each), all.subspan(r * mine.size(), mine.size()));
}

// data = decode(encode(root's data)) on every rank, the root included.
template <class Communicator, codec::codec Codec>
void broadcast(Communicator& comm, std::span<float> data, int root, const Codec& c) {
  if (memory_router* router = routed(data))
    return through_host(*router, comm, [&](std::span<float> host) { broadcast(comm, host, root, c); },
                        staged(data, buffer_use::read_write));  // the root's data is decoded too
  collective::check_root(root, comm.size(), comm.transport().rank(), "compressed broadcast");
  std::vector<std::byte> encoded(c.encoded_bytes(data.size()));
  if (comm.rank() == root) c.encode(data, encoded);
  broadcast(comm, compressed::as_octets(encoded), root);
  c.decode(encoded, data);
}

}  // namespace chorus
