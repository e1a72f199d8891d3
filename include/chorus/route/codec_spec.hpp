// codec_spec: a codec as a plain description, for interfaces that cannot be
// templates over the codec (the direct path's device arithmetic).
#pragma once

#include <cstddef>
#include <string_view>

namespace chorus {

// A codec as the direct path's arithmetic is told it (codec/spec.hpp makes
// one from a codec): its name (fp16, bf16, int8, onebit), its block size
// (int8, onebit) and whether a two-byte float saturates on overflow.
struct codec_spec {
  std::string_view name;
  std::size_t block = 0;
  bool saturate = true;
};

}  // namespace chorus
