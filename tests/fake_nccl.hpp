// NCCL on the fake device (fake_device.hpp), for tests: the host adapter
// moves the fake's device memory through its host alias, after the work
// already on the stream, as NCCL's kernels would; other memory stays with
// the chorus communicator, as NCCL leaves host memory.
#pragma once

#include "fake_device.hpp"

#include <chorus/nccl/host_adapter.hpp>

#include <cstddef>
#include <memory>

namespace chorus_test {

inline std::shared_ptr<chorus::nccl::host_adapter> nccl_on(fake_device& fake) {
  chorus::nccl::host_adapter_options on_fake;
  on_fake.moves = [&fake](const void* p) { return fake.kind_of(p) == chorus::memory_kind::cuda_device; };
  on_fake.address = [&fake](const void* p) {
    return static_cast<void*>(fake.alias_of(const_cast<std::byte*>(static_cast<const std::byte*>(p))));
  };
  on_fake.after_stream = [&fake](chorus::nccl::stream_handle s) { fake.synchronize(s); };
  return std::make_shared<chorus::nccl::host_adapter>(std::move(on_fake));
}

}  // namespace chorus_test
