// Error feedback around a codec chosen at run time (codec/any_codec.hpp),
// for code that is not a template over the codec (allreduce-SGD's
// --codec): one object per tensor, holding error_feedback<C> for the C the
// any_codec names.
//
//   chorus::codec::any_error_feedback feedback(chorus::codec::by_name("topk:0.01"));
//   feedback.visit([&](auto& f) { chorus::allreduce(comm, grads, chorus::op::avg{}, f); });
#pragma once

#include <chorus/codec/any_codec.hpp>
#include <chorus/codec/error_feedback.hpp>

#include <type_traits>
#include <utility>
#include <variant>

namespace chorus::codec {

class any_error_feedback {
 public:
  // An empty any_codec (none) holds no feedback; visit() is then an error.
  explicit any_error_feedback(const any_codec& wire) {
    if (wire)
      codec::visit(wire,
                   [&](const auto& c) { held_.template emplace<error_feedback<std::remove_cvref_t<decltype(c)>>>(c); });
  }

  explicit operator bool() const noexcept { return held_.index() != 0; }

  // f(error_feedback<C>&) for the codec held.
  template <class F>
  decltype(auto) visit(F&& f) {
    return visit_held<std::invoke_result_t<F&, error_feedback<identity>&>>(held_, f);
  }
  template <class F>
  decltype(auto) visit(F&& f) const {
    return visit_held<std::invoke_result_t<F&, const error_feedback<identity>&>>(held_, f);
  }

 private:
  template <class Result, class Held, class F>
  static Result visit_held(Held& held, F& f) {
    return std::visit(
        [&](auto& state) -> Result {
          if constexpr (std::is_same_v<std::remove_cvref_t<decltype(state)>, std::monostate>)
            throw error(errc::invalid_argument, "any_error_feedback: no codec (none) to feed back through");
          else
            return f(state);
        },
        held);
  }

  template <class... Codecs>
  using states = std::variant<std::monostate, error_feedback<Codecs>...>;
  codecs::apply<states> held_;
};

}  // namespace chorus::codec
