// Tensor fusion: allreduce many tensors (say one per layer) through a few
// fixed-size buckets, so many small gradient tensors cost a few large
// messages instead of one latency-bound message each.
//
//   std::vector<std::span<float>> grads = ...;
//   chorus::fused_allreduce(comm, grads);                 // 25 MiB buckets
//   chorus::fused_allreduce(comm, grads, chorus::op::avg{}, 4 << 20);
//
// Consecutive tensors are packed into a bucket until the next would not fit;
// a tensor larger than a bucket is reduced in place on its own. The bucket
// size comes from the argument, else CHORUS_FUSION_BUCKET (bytes, or with
// K/M/G), else 25 MiB. Returns the number of allreduce calls made.
#pragma once

#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/core/env.hpp>
#include <chorus/route/memory_router.hpp>

#include <algorithm>
#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace chorus {

inline constexpr std::size_t default_fusion_bucket_bytes = 25u << 20;

inline std::size_t fusion_bucket_bytes() {
  return env::get_size("CHORUS_FUSION_BUCKET").value_or(default_fusion_bucket_bytes);
}

template <class Communicator, element T, reduction_operator Op = op::sum>
std::size_t fused_allreduce(Communicator& comm, std::span<const std::span<T>> tensors, Op op = {},
                            std::size_t bucket_bytes = 0) {
  if (bucket_bytes == 0) bucket_bytes = fusion_bucket_bytes();
  const std::size_t capacity = std::max<std::size_t>(1, bucket_bytes / sizeof(T));
  std::vector<T> bucket;
  std::size_t calls = 0;
  std::size_t first = 0;  // first tensor in the bucket
  const auto flush = [&](std::size_t end) {
    if (first == end) return;
    std::size_t total = 0;
    for (std::size_t t = first; t < end; ++t) total += tensors[t].size();
    bucket.resize(total);
    // copy_elements: a tensor may be device memory (route/memory_router.hpp).
    for (std::size_t t = first, offset = 0; t < end; offset += tensors[t].size(), ++t)
      copy_elements(comm, tensors[t].data(), tensors[t].size(), bucket.data() + offset);
    allreduce(comm, std::span<T>(bucket), op);
    ++calls;
    for (std::size_t t = first, offset = 0; t < end; offset += tensors[t].size(), ++t)
      copy_elements(comm, std::as_const(bucket).data() + offset, tensors[t].size(), tensors[t].data());
    first = end;
  };
  std::size_t filled = 0;
  for (std::size_t t = 0; t < tensors.size(); ++t) {
    const std::size_t size = tensors[t].size();
    if (size > capacity) {  // too big for any bucket: reduce it where it is
      flush(t);
      allreduce(comm, tensors[t], op);
      ++calls;
      first = t + 1;
      filled = 0;
      continue;
    }
    if (filled + size > capacity) {
      flush(t);
      filled = 0;
    }
    filled += size;
  }
  flush(tensors.size());
  return calls;
}

template <class Communicator, element T, reduction_operator Op = op::sum>
std::size_t fused_allreduce(Communicator& comm, const std::vector<std::span<T>>& tensors, Op op = {},
                            std::size_t bucket_bytes = 0) {
  return fused_allreduce(comm, std::span<const std::span<T>>(tensors), op, bucket_bytes);
}

}  // namespace chorus
