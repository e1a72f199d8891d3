// chorus._nccl: the NCCL library behind chorus's adapter interface
// (nccl/library.hpp), in an extension of its own so that `import chorus`
// loads no NCCL. chorus.nccl.connect imports torch first where it can, so
// that torch's libnccl.so.2 is the one the loader shares by its soname (a
// process has one NCCL; torch's may be newer than the one chorus was built
// with, and torch needs its symbols), then this module, whose adapter
// crosses to chorus._chorus in a capsule.
#include <chorus/nccl/library.hpp>

#include <nanobind/nanobind.h>

#include <memory>

namespace nb = nanobind;

NB_MODULE(_nccl, m) {
  m.doc() = "The NCCL library as chorus's NCCL adapter (for chorus.nccl.connect).";
  m.def(
      "adapter",
      [] {
        auto* held = new std::shared_ptr<chorus::nccl::adapter>(chorus::nccl::library());
        return nb::capsule(held, "chorus.nccl_adapter",
                           [](void* p) noexcept { delete static_cast<std::shared_ptr<chorus::nccl::adapter>*>(p); });
      },
      "A new handle on the NCCL library (capsule 'chorus.nccl_adapter').");
}
