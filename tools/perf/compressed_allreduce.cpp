// allreduce --codec C: a float allreduce whose bytes travel encoded
// (chorus/compressed/compressed_allreduce.hpp), sum or avg. Sizes are the float
// tensor's bytes, so busbw compares directly with uncompressed runs. #wrong
// counts elements farther from the exact result than the codec's stated
// bound (chorus/compressed/error_bound.hpp) for the scheme that ran.
#include "collective.hpp"

#include <chorus/codec/any_codec.hpp>
#include <chorus/compressed/compressed_allreduce.hpp>
#include <chorus/compressed/error_bound.hpp>

#include <cmath>

namespace perf {
namespace {

template <class Codec>
struct compressed_allreduce {
  static constexpr std::string_view name = "allreduce";
  static constexpr bool reduces = true, in_place = true;

  Codec codec;
  chorus::compression_options options;

  double bus_factor(int n) const { return 2.0 * (n - 1) / n; }
  layout shape(std::size_t elements, int) const { return {elements, elements, elements}; }

  template <class Op>
  chorus::algorithm call(const context& c, buffers<float>& b, form f, Op op) const {
    if (f == form::in_place)
      return c.on([&](auto& comm) { return chorus::allreduce(comm, b.in_place(b.shape.count), op, codec, options); });
    b.copy_input_to_output();
    return c.on([&](auto& comm) { return chorus::allreduce(comm, b.out(), op, codec, options); });
  }

  static std::string label(chorus::algorithm used) {
    if (used == chorus::algorithm::nccl) return std::string(Codec::name) + "/nccl";
    return std::string(Codec::name) + "/" +
           std::string(chorus::compressed::scheme_name(chorus::compressed::as_scheme(used)));
  }

  // The bound is computed a chunk of whole codec blocks at a time, from
  // every rank's contribution rebuilt here.
  template <class Op>
  std::uint64_t wrong(const context& c, const buffers<float>& b, form f, Op) const {
    constexpr bool average = std::is_same_v<Op, chorus::op::avg>;
    const double divisor = average ? c.ranks : 1;
    const std::size_t total = b.shape.count;
    chorus::compression_options resolved = options;
    // Over NCCL each contribution is encoded once and the sum never: within
    // the encode-once bound, which also counts the sum's encoding.
    resolved.scheme = c.nccl != nullptr ? chorus::compression_scheme::encode_once
                                        : chorus::compressed::scheme_for(codec, c.ranks, total, options);
    // A sparse codec chooses across the whole tensor: its bound is too.
    const std::size_t chunk = chorus::codec::sparse<Codec>
                                  ? std::max<std::size_t>(total, 1)
                                  : codec.granule() * std::max<std::size_t>(1, (1u << 16) / codec.granule());
    const std::vector<float>& result = b.result(f);
    std::vector<std::vector<float>> contributions(static_cast<std::size_t>(c.ranks));
    std::uint64_t wrong = 0;
    for (std::size_t first = 0; first < total; first += chunk) {
      const std::size_t count = std::min(chunk, total - first);
      for (int r = 0; r < c.ranks; ++r) {
        auto& x = contributions[static_cast<std::size_t>(r)];
        x.resize(count);
        for (std::size_t k = 0; k < count; ++k) x[k] = input_at<float>(c.config, r, first + k);
      }
      const std::vector<float> bound = chorus::compressed::allreduce_error_bound(codec, contributions, resolved);
      for (std::size_t k = 0; k < count; ++k) {
        double exact = 0;
        for (const auto& x : contributions) exact += x[k];
        wrong += !(std::fabs(result[first + k] - exact / divisor) <= bound[k] / divisor * (1 + 1e-6));
      }
    }
    return wrong;
  }
};

template <class Codec>
int run_codec(chorus::communicator& comm, const options& config, const Codec& codec) {
  chorus::compression_options options;
  options.scheme = config.scheme;
  const compressed_allreduce<Codec> d{codec, options};
  if (config.op == "avg") return sweep_with<compressed_allreduce<Codec>, float>(comm, config, d, chorus::op::avg{});
  return sweep_with<compressed_allreduce<Codec>, float>(comm, config, d, chorus::op::sum{});
}

// chorus-perf checked the arguments: float, sum or avg, a codec by_name
// knows (topk:0.01 and randomk:0.01 with their ratios).
int run_compressed(chorus::communicator& comm, const options& config) {
  return chorus::codec::visit(chorus::codec::by_name(config.codec),
                              [&](const auto& codec) { return run_codec(comm, config, codec); });
}

}  // namespace

const collective compressed_allreduce_entry{"allreduce", true, &run_compressed};

}  // namespace perf
