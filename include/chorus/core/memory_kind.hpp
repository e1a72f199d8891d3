// Where a buffer lives. A transport declares the set of kinds it can move;
// algorithms stage through pinned host memory for the kinds it cannot.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string_view>

namespace chorus {

enum class memory_kind : std::uint8_t { host = 0, cuda_device = 1, cuda_pinned = 2 };

constexpr std::string_view to_string(memory_kind kind) noexcept {
  switch (kind) {
    case memory_kind::host: return "host";
    case memory_kind::cuda_device: return "cuda_device";
    case memory_kind::cuda_pinned: return "cuda_pinned";
  }
  return "unknown";
}

// A small set of memory kinds.
class memory_kinds {
 public:
  constexpr memory_kinds() noexcept = default;
  constexpr memory_kinds(std::initializer_list<memory_kind> kinds) noexcept {
    for (memory_kind kind : kinds) bits_ |= bit(kind);
  }
  constexpr bool contains(memory_kind kind) const noexcept { return (bits_ & bit(kind)) != 0; }
  constexpr memory_kinds& insert(memory_kind kind) noexcept {
    bits_ |= bit(kind);
    return *this;
  }
  constexpr bool operator==(const memory_kinds&) const noexcept = default;

 private:
  static constexpr std::uint8_t bit(memory_kind kind) noexcept {
    return static_cast<std::uint8_t>(1u << static_cast<unsigned>(kind));
  }
  std::uint8_t bits_ = 0;
};

}  // namespace chorus
