// Staged or direct: how a device buffer moves.
//
// - staged: through pinned host memory (cuda/staging.hpp); any UCX, any
//   trainer (the host reduces).
// - direct: device pointers go to UCX as they are and the reductions run on
//   the device; needs a UCX that moves CUDA memory (ucp_context_query
//   reports it; Debian's UCX 1.13 does not, PyPI's libucx-cu13 does), that
//   takes the call's buffer for CUDA memory (ucp_mem_query after
//   ucp_mem_map, in the UCX transport), and the device
//   kernels (cuda/device_compute.hpp, from an nvcc-compiled file).
//
// CHORUS_CUDA_PATH (or router_options::path) chooses: `auto` takes direct
// where all three hold; `direct` is an error (unavailable) where one does not;
// `staged` always stages. Calls the direct path does not cover (element
// types reduced in a wider accumulator, user-defined ops, algorithms other
// than the ring) are staged under any choice, and say so when reported.
#pragma once

#include <chorus/core/env.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/variables.hpp>
#include <chorus/route/memory_router.hpp>

#include <optional>
#include <string>

namespace chorus::cuda {

enum class path_setting { automatic, staged, direct };

// CHORUS_CUDA_PATH; automatic when unset or "auto".
inline path_setting path_from_environment() {
  const auto choice = env::get_choice("CHORUS_CUDA_PATH", variables::cuda_path_choices);
  if (!choice || *choice == 0) return path_setting::automatic;
  return *choice == 1 ? path_setting::staged : path_setting::direct;
}

// What the choice depends on, for one call.
struct path_facts {
  bool network_reaches_device = false;      // the transport moves CUDA memory
  bool have_kernels = false;                // a device_compute was given
  bool kernels_take_call = false;           // ... and it takes this element type and op, or this codec
  bool buffer_registered_as_device = true;  // the transport takes this buffer for CUDA memory (ucp_mem_query)
};

// Whether a call goes direct, and why; throws `unavailable` when direct is
// required and cannot be had.
inline path_report choose_path(path_setting setting, const path_facts& facts) {
  if (setting == path_setting::staged) return {false, "staged (CHORUS_CUDA_PATH=staged)"};
  const bool forced = setting == path_setting::direct;
  const char* missing =
      !facts.network_reaches_device ? "the transport moves host memory only (UCX reports no CUDA memory support)"
      : !facts.buffer_registered_as_device
          ? "UCX registers this buffer as host memory (ucp_mem_query), not as CUDA memory"
      : !facts.have_kernels ? "no device kernels were given (chorus::cuda::kernels::compute, from a file nvcc compiles)"
                            : nullptr;
  if (missing != nullptr) {
    if (forced) throw error(errc::unavailable, std::string("CHORUS_CUDA_PATH=direct, but ") + missing);
    return {false, std::string("staged: ") + missing};
  }
  if (!facts.kernels_take_call)
    return {false, "staged: the device kernels do not take this call's element type and op, or its codec"};
  return {true, std::string("direct (") + (forced ? "CHORUS_CUDA_PATH=direct" : "auto") +
                    ": device memory goes to the transport as it is)"};
}

}  // namespace chorus::cuda
