// chorus's version, as CMakeLists.txt's project() states it (configuring checks
// that the two agree); flight records carry it.
#pragma once

#include <string_view>

namespace chorus {

inline constexpr std::string_view version = "0.1.0";

}  // namespace chorus
