// Mismatch detection: with CHORUS_CHECK=1 (and always in builds without
// NDEBUG) every collective first gathers each rank's view of the call
// (operation, count, element type, operator, root) and raises a mismatch
// error naming the disagreeing ranks, instead of hanging or corrupting
// memory. Costs one small allgather (ceil(log2 n) alpha) per call.
#pragma once

#include <chorus/collective/allgather_recursive_doubling.hpp>
#include <chorus/collective/exchange.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::collective {

// One rank's description of a collective call, sent as plain bytes.
struct call_signature {
  std::array<char, 16> operation{};
  std::array<char, 16> op{};
  std::uint64_t count = 0;
  std::int32_t root = -1;
  std::uint8_t type = 0;
  std::array<std::uint8_t, 3> padding{};

  call_signature() = default;
  call_signature(std::string_view operation_name, std::uint64_t elements, dtype element, std::string_view op_name,
                 int root_rank)
      : count(elements), root(root_rank), type(static_cast<std::uint8_t>(element)) {
    std::memcpy(operation.data(), operation_name.data(), std::min(operation_name.size(), operation.size() - 1));
    std::memcpy(op.data(), op_name.data(), std::min(op_name.size(), op.size() - 1));
  }

  bool operator==(const call_signature& other) const noexcept {
    return std::memcmp(this, &other, sizeof *this) == 0;
  }

  std::string describe() const {
    std::string text = std::string(operation.data()) + "(count " + std::to_string(count) + ", " +
                       std::string(to_string(static_cast<dtype>(type)));
    if (op[0] != '\0') text += ", " + std::string(op.data());
    if (root >= 0) text += ", root " + std::to_string(root);
    return text + ")";
  }
};
static_assert(sizeof(call_signature) == 48);

// Agrees on `mine` with every rank; throws mismatch if any rank differs.
template <class Communicator>
void check_agreement(Communicator& comm, const call_signature& mine) {
  exchange ex(comm, "collective check");
  std::vector<call_signature> all(static_cast<std::size_t>(comm.size()));
  all[static_cast<std::size_t>(comm.rank())] = mine;
  std::span<std::byte> bytes = std::as_writable_bytes(std::span(all));
  allgather_recursive_doubling(ex, bytes, sizeof(call_signature));
  std::string differing;
  for (std::size_t r = 1; r < all.size(); ++r)
    if (!(all[r] == all[0])) differing += "; rank " + std::to_string(r) + " calls " + all[r].describe();
  if (!differing.empty())
    throw error(errc::mismatch, "ranks disagree: rank 0 calls " + all[0].describe() + differing,
                {comm.transport().rank(), -1, std::string(mine.operation.data())});
}

template <class Communicator>
bool check_enabled(const Communicator& comm) {
  return comm.config().check;
}

template <class Communicator>
void check_if_enabled(Communicator& comm, const call_signature& mine) {
  if (check_enabled(comm)) check_agreement(comm, mine);
}

}  // namespace chorus::collective
