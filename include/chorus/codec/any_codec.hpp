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
// by_name knows none (no codec: a default any_codec) and every codec of
// codec_list.hpp: identity, fp16, bf16, int8, onebit, and the sparse topk:R
// and randomk:R (R the ratio of elements kept, 0.01 when left out;
// randomk:R:SEED sets the seed every rank shares); any other name is an
// invalid_argument error listing them.
#pragma once

#include <chorus/codec/codec.hpp>
#include <chorus/codec/codec_list.hpp>
#include <chorus/core/error.hpp>

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

inline any_codec by_name(std::string_view name) {
  if (name == "none") return {};
  const std::size_t colon = name.find(':');
  const std::string_view family = name.substr(0, colon);
  const std::string_view settings = colon == std::string_view::npos ? std::string_view{} : name.substr(colon + 1);
  std::optional<any_codec> made;
  codecs::for_each([&]<class C>() {
    if (made || C::name != family) return;
    if constexpr (requires { C::from_settings(settings, name); })
      made = any_codec(C::from_settings(settings, name));
    else if (colon != std::string_view::npos)
      throw error(errc::invalid_argument,
                  "codec '" + std::string(name) + "': " + std::string(family) + " takes no settings in its name");
    else
      made = any_codec(C{});
  });
  if (!made)
    throw error(errc::invalid_argument, "unknown codec '" + std::string(name) + "' (none, " + codec_names() + ")");
  return *made;
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

namespace detail {

template <class... Codecs>
struct visit_codecs {
  template <class F, class First, class... Rest>
  static decltype(auto) as_each(const any_codec& wire, F& f) {
    if (const auto* c = wire.as<First>()) return f(*c);
    if constexpr (sizeof...(Rest) > 0)
      return as_each<F, Rest...>(wire, f);
    else
      throw error(errc::invalid_argument, "codec::visit: no codec of type '" + std::string(wire.name()) + "'");
  }
  template <class F>
  static decltype(auto) visit(const any_codec& wire, F& f) {
    return as_each<F, Codecs...>(wire, f);
  }
};

}  // namespace detail

// Calls f with the concrete codec behind `wire`, as it was made (an int8's
// block included), for code that needs the codec's type (the compressed
// collectives); an empty any_codec is an error.
template <class F>
decltype(auto) visit(const any_codec& wire, F&& f) {
  return codecs::apply<detail::visit_codecs>::visit(wire, f);
}

}  // namespace chorus::codec
