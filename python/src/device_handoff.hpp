// What chorus._testing hands chorus._chorus to stand in for a GPU: the two
// extensions are separate shared objects built from the same headers, so
// the fake device's objects cross as pointers in a capsule named
// `device_handoff::capsule_name`, and live until the process ends.
#pragma once

#include <chorus/cuda/device.hpp>
#include <chorus/cuda/device_compute.hpp>

#include <functional>

namespace chorus::python {

struct device_handoff {
  static constexpr const char* capsule_name = "chorus.device_handoff";
  cuda::device_operations* operations = nullptr;
  cuda::device_compute* compute = nullptr;  // the direct path's kernels; null: always staged
  // NCCL on the fake device: the hooks of nccl::host_adapter_options
  // (nccl/host_adapter.hpp), so chorus.nccl.connect runs over chorus's own
  // host adapter where there is no GPU. Empty: the NCCL library.
  std::function<bool(const void*)> nccl_moves;
  std::function<void*(const void*)> nccl_address;
  std::function<void(void*)> nccl_after_stream;
};

}  // namespace chorus::python
