// any_codec: a codec chosen at run time (a trainer's --codec flag), behind
// one small virtual interface so that the averaging schemes need not be
// templates over every codec. One virtual call per tensor, not per element.
//
//   chorus::codec::any_codec wire = chorus::codec::by_name("fp16");
//   wire.encode(values, bytes);  wire.decode(bytes, values);
//
// visit(wire, f) calls f with the concrete codec (for the compressed
// collectives, which are templates over it).
//
// by_name knows none (no codec: a default any_codec), identity, fp16, bf16,
// int8, onebit, and the sparse topk:R and randomk:R (R the ratio of elements
// kept, 0.01 when left out; randomk:R:SEED sets the seed every rank shares);
// any other name is an invalid_argument error listing them.
#pragma once

#include <chorus/codec/bf16.hpp>
#include <chorus/codec/codec.hpp>
#include <chorus/codec/fp16.hpp>
#include <chorus/codec/identity.hpp>
#include <chorus/codec/int8.hpp>
#include <chorus/codec/onebit.hpp>
#include <chorus/codec/randomk.hpp>
#include <chorus/codec/topk.hpp>
#include <chorus/core/error.hpp>

#include <charconv>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace chorus::codec {

class any_codec {
 public:
  // No codec ("none"): false in a test, and its bytes are the raw floats, so
  // point-to-point users may encode and decode through it either way.
  any_codec() : model_(raw()) {}
  template <codec C>
  explicit any_codec(C coder) : model_(std::make_shared<holder<C>>(std::move(coder))) {}

  explicit operator bool() const noexcept { return model_ != raw(); }
  std::string_view name() const noexcept { return *this ? model_->name() : "none"; }
  // Whether it keeps only some elements (topk, randomk: codec.hpp, sparse).
  bool sparse() const noexcept { return model_->sparse(); }
  std::size_t encoded_bytes(std::size_t n) const { return model_->encoded_bytes(n); }
  void encode(std::span<const float> in, std::span<std::byte> out) const { model_->encode(in, out); }
  void decode(std::span<const std::byte> in, std::span<float> out) const { model_->decode(in, out); }
  void decode_add(std::span<const std::byte> in, std::span<float> acc) const { model_->decode_add(in, acc); }

  // The codec held, if it is a C (with its settings: an int8's block).
  template <codec C>
  const C* as() const noexcept {
    const auto* held = dynamic_cast<const holder<C>*>(model_.get());
    return *this && held != nullptr ? &held->coder : nullptr;
  }

 private:
  struct concept_ {
    virtual ~concept_() = default;
    virtual std::string_view name() const noexcept = 0;
    virtual bool sparse() const noexcept = 0;
    virtual std::size_t encoded_bytes(std::size_t n) const = 0;
    virtual void encode(std::span<const float> in, std::span<std::byte> out) const = 0;
    virtual void decode(std::span<const std::byte> in, std::span<float> out) const = 0;
    virtual void decode_add(std::span<const std::byte> in, std::span<float> acc) const = 0;
  };
  template <class C>
  struct holder final : concept_ {
    explicit holder(C given) : coder(std::move(given)) {}
    std::string_view name() const noexcept override { return C::name; }
    bool sparse() const noexcept override { return codec::sparse<C>; }
    std::size_t encoded_bytes(std::size_t n) const override { return coder.encoded_bytes(n); }
    void encode(std::span<const float> in, std::span<std::byte> out) const override { coder.encode(in, out); }
    void decode(std::span<const std::byte> in, std::span<float> out) const override { coder.decode(in, out); }
    void decode_add(std::span<const std::byte> in, std::span<float> acc) const override { coder.decode_add(in, acc); }
    C coder;
  };
  static const std::shared_ptr<const concept_>& raw() {
    static const std::shared_ptr<const concept_> shared = std::make_shared<holder<identity>>(identity{});
    return shared;
  }

  // Codecs are stateless but for randomk's count of calls (atomic, shared by
  // its copies): every rank must make the same calls on it.
  std::shared_ptr<const concept_> model_;
};

namespace detail {

// "topk:0.05" -> 0.05; `what` names the part for the error.
template <class Number>
Number parse_part(std::string_view text, std::string_view whole, std::string_view what) {
  Number value{};
  const auto [end, failed] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (failed != std::errc{} || end != text.data() + text.size())
    throw error(errc::invalid_argument,
                "codec '" + std::string(whole) + "': '" + std::string(text) + "' is not a " + std::string(what));
  return value;
}

// The sparse codecs' names: topk[:R], randomk[:R[:SEED]].
inline std::optional<any_codec> sparse_by_name(std::string_view name) {
  const std::size_t colon = name.find(':');
  const std::string_view family = name.substr(0, colon);
  if (family != topk::name && family != randomk::name) return std::nullopt;
  std::string_view rest = colon == std::string_view::npos ? std::string_view{} : name.substr(colon + 1);
  const std::size_t second = rest.find(':');
  const double ratio = rest.empty() ? 0.01 : parse_part<double>(rest.substr(0, second), name, "ratio");
  if (family == topk::name) {
    if (second != std::string_view::npos)
      throw error(errc::invalid_argument, "codec '" + std::string(name) + "': topk takes a ratio only (topk:R)");
    return any_codec(topk(ratio));
  }
  if (second == std::string_view::npos) return any_codec(randomk(ratio));
  return any_codec(randomk(ratio, parse_part<std::uint64_t>(rest.substr(second + 1), name, "seed")));
}

}  // namespace detail

inline any_codec by_name(std::string_view name) {
  if (auto sparse = detail::sparse_by_name(name)) return *sparse;
  if (name == "none") return {};
  if (name == "identity") return any_codec(identity{});
  if (name == "fp16") return any_codec(fp16{});
  if (name == "bf16") return any_codec(bf16{});
  if (name == "int8") return any_codec(int8{});
  if (name == "onebit") return any_codec(onebit{});
  throw error(errc::invalid_argument, "unknown codec '" + std::string(name) +
                                          "' (none, identity, fp16, bf16, int8, onebit, topk:R, randomk:R[:SEED])");
}

// Schemes that send models (D-PSGD, GoSGD, local SGD, EASGD) take dense
// codecs only: a sparse one would send zeros for most weights, which the
// receiver would average in. Sparse codecs compress gradients (allreduce-SGD
// with error feedback).
inline void require_model_codec(const any_codec& wire, std::string_view scheme) {
  if (wire.sparse())
    throw error(errc::invalid_argument, std::string(scheme) + " sends models, and " + std::string(wire.name()) +
                                            " would drop most of their weights; sparse codecs compress gradients "
                                            "(allreduce-SGD, which keeps the rest by error feedback)");
}

// Calls f with the concrete codec behind `wire`, as it was made (an int8's
// block included), for code that needs the codec's type (the compressed
// collectives); an empty any_codec is an error.
template <class F>
decltype(auto) visit(const any_codec& wire, F&& f) {
  if (const auto* c = wire.as<identity>()) return f(*c);
  if (const auto* c = wire.as<fp16>()) return f(*c);
  if (const auto* c = wire.as<bf16>()) return f(*c);
  if (const auto* c = wire.as<int8>()) return f(*c);
  if (const auto* c = wire.as<onebit>()) return f(*c);
  if (const auto* c = wire.as<topk>()) return f(*c);
  if (const auto* c = wire.as<randomk>()) return f(*c);
  throw error(errc::invalid_argument, "codec::visit: no codec of type '" + std::string(wire.name()) + "'");
}

}  // namespace chorus::codec
