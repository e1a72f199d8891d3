// What chorus._testing hands chorus._chorus to stand in for a GPU: the two
// extensions are separate shared objects built from the same headers, so
// the fake device's objects cross as pointers in a capsule named
// `device_handoff::capsule_name`, and live until the process ends.
#pragma once

#include <chorus/cuda/device.hpp>
#include <chorus/cuda/device_compute.hpp>

namespace chorus::python {

struct device_handoff {
  static constexpr const char* capsule_name = "chorus.device_handoff";
  cuda::device_operations* operations = nullptr;
  cuda::device_compute* compute = nullptr;  // the direct path's kernels; null: always staged
};

}  // namespace chorus::python
