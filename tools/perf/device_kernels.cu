// chorus-perf's device kernels, for the direct path (CHORUS_CUDA_PATH): the
// reductions and codecs of --device cuda run on the GPU where UCX moves CUDA
// memory. Compiled by nvcc where the toolkit has it; without it chorus-perf
// stages every reduction (and says so under CHORUS_DEBUG=1).
#include <chorus/cuda/kernels.cuh>

namespace perf {

chorus::cuda::device_compute& device_kernels() {
  static chorus::cuda::kernels::compute kernels;
  return kernels;
}

}  // namespace perf
