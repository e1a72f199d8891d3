// Mismatch detection: with CHORUS_CHECK=1 (and always in builds without
// NDEBUG) every collective first gathers each rank's view of the call
// (operation, count, element type, operator, root, and whether the buffers
// are device or host memory, which picks the path) and raises a mismatch
// error on every rank naming the ranks that differ from the others,
// instead of hanging or corrupting memory. Costs one allgather of 48 bytes
// per rank per call (ceil(log2 n) alpha + 48 n beta: 3 MiB at 65,536 ranks).
#pragma once

#include <chorus/collective/machinery/bruck.hpp>
#include <chorus/collective/machinery/exchange.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/memory_kind.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chorus::collective {

// One rank's description of a collective call, sent as plain bytes.
struct call_signature {
  std::array<char, 16> operation{};
  std::array<char, 16> op{};
  std::uint64_t count = 0;
  std::int32_t root = -1;
  std::uint8_t type = 0;
  std::uint8_t memory = 0;  // memory_kind: host, or device (route/memory_router.hpp, call_memory)
  std::array<std::uint8_t, 2> padding{};

  call_signature() = default;
  call_signature(std::string_view operation_name, std::uint64_t elements, dtype element, std::string_view op_name,
                 int root_rank, memory_kind buffers)
      : count(elements),
        root(root_rank),
        type(static_cast<std::uint8_t>(element)),
        memory(static_cast<std::uint8_t>(buffers)) {
    std::memcpy(operation.data(), operation_name.data(), std::min(operation_name.size(), operation.size() - 1));
    std::memcpy(op.data(), op_name.data(), std::min(op_name.size(), op.size() - 1));
  }

  bool operator==(const call_signature& other) const noexcept { return std::memcmp(this, &other, sizeof *this) == 0; }

  std::string describe() const {
    std::string text = std::string(operation.data()) + "(count " + std::to_string(count) + ", " +
                       std::string(to_string(static_cast<dtype>(type)));
    if (op[0] != '\0') text += ", " + std::string(op.data());
    if (root >= 0) text += ", root " + std::to_string(root);
    const auto kind = static_cast<memory_kind>(memory);
    return text + (kind == memory_kind::cuda_device ? ", device memory)" : ", host memory)");
  }
};
static_assert(sizeof(call_signature) == 48);

// "ranks 0, 1, 3 call allreduce(...)", or "rank 2 calls ...".
inline std::string who_calls(const std::vector<std::size_t>& ranks, const call_signature& call) {
  std::string text = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) text += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  return text + (ranks.size() == 1 ? " calls " : " call ") + call.describe();
}

// Every rank's signature is the same, or the mismatch error every rank
// raises: the call most ranks make (rank 0's on a tie) first, then each
// other call with the ranks that make it.
inline void require_agreement(const std::vector<call_signature>& all, int world_rank, std::string_view operation) {
  std::vector<std::pair<call_signature, std::vector<std::size_t>>> calls;  // in order of first rank
  for (std::size_t r = 0; r < all.size(); ++r) {
    auto same = std::find_if(calls.begin(), calls.end(), [&](const auto& call) { return call.first == all[r]; });
    if (same == calls.end())
      calls.push_back({all[r], {r}});
    else
      same->second.push_back(r);
  }
  if (calls.size() == 1) return;
  std::stable_sort(calls.begin(), calls.end(),
                   [](const auto& a, const auto& b) { return a.second.size() > b.second.size(); });
  std::string text = "ranks disagree: " + who_calls(calls[0].second, calls[0].first);
  for (std::size_t c = 1; c < calls.size(); ++c) text += "; " + who_calls(calls[c].second, calls[c].first);
  throw error(errc::mismatch, text, {world_rank, -1, std::string(operation)});
}

// Agrees on `mine` with every rank; throws mismatch if any rank differs.
template <class Communicator>
void check_agreement(Communicator& comm, const call_signature& mine) {
  comm.require_merged(mine.operation.data());  // named for the call, not for its check
  exchange ex(comm, "collective check");
  std::vector<call_signature> all(static_cast<std::size_t>(comm.size()));
  all[static_cast<std::size_t>(comm.rank())] = mine;
  std::span<std::byte> bytes = std::as_writable_bytes(std::span(all));
  bruck_allgather(ex, bytes, sizeof(call_signature));
  require_agreement(all, comm.transport().rank(), mine.operation.data());
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
