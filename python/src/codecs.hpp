// chorus.Codec (a codec with its settings: any_codec) and chorus.ErrorFeedback
// (a codec with the residual of one tensor), and the `codec=` argument the
// compressed collectives take: None, a name, a Codec or an ErrorFeedback.
#pragma once

#include "binding.hpp"

#include <chorus/codec/any_codec.hpp>
#include <chorus/codec/any_error_feedback.hpp>

namespace chorus::python {

struct py_codec {
  codec::any_codec wire;
};

// One tensor's residual: use one object per tensor (per DDP bucket), on
// one call at a time.
struct py_feedback {
  codec::any_error_feedback state;
  std::string name;
};

struct codec_choice {
  codec::any_codec wire;            // when no feedback
  py_feedback* feedback = nullptr;  // owned by the Python object the call keeps referenced

  bool active() const { return feedback != nullptr || static_cast<bool>(wire); }
  std::string_view name() const { return feedback ? std::string_view(feedback->name) : wire.name(); }

  // f(codec or error feedback), the concrete type as the compressed
  // collectives take it.
  template <class F>
  decltype(auto) visit(F&& f) const {
    if (feedback) return feedback->state.visit([&](auto& state) { return f(state); });
    return codec::visit(wire, [&](const auto& coder) { return f(coder); });
  }

  // f(codec), for the collectives that keep no residual (broadcast, allgather).
  template <class F>
  decltype(auto) visit_codec(F&& f) const {
    return codec::visit(wire, [&](const auto& coder) { return f(coder); });
  }

  static codec_choice from(nb::handle given, std::string_view operation);
};

// A codec compresses float32 arrays: anything else is an InvalidArgument.
void require_codec_input(const buffer& seen, std::string_view operation);

}  // namespace chorus::python
