// Splitting `count` elements into `parts` contiguous blocks whose sizes
// differ by at most one (the first count % parts blocks get the extra one),
// as ring and halving algorithms need for counts that do not divide evenly.
#pragma once

#include <cstddef>

namespace chorus::collective {

struct block_partition {
  std::size_t count;
  std::size_t parts;

  std::size_t size(std::size_t block) const noexcept { return count / parts + (block < count % parts ? 1 : 0); }
  std::size_t offset(std::size_t block) const noexcept {
    const std::size_t base = count / parts, extra = count % parts;
    return block * base + (block < extra ? block : extra);
  }
  // Elements in blocks [first, last).
  std::size_t span_size(std::size_t first, std::size_t last) const noexcept { return offset(last) - offset(first); }
};

}  // namespace chorus::collective
