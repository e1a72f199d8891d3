// A codec as a plain description (route/codec_spec.hpp), for
// interfaces that cannot be templates over the codec: the direct path's
// device arithmetic is told which codec to run through one.
//
//   const codec_spec spec = chorus::codec::spec_of(chorus::codec::int8{64});   // {"int8", 64, true}
//   chorus::codec::visit_spec(spec, [&](const auto& c) { ... c is int8{64} ... });
#pragma once

#include <chorus/codec/codec_list.hpp>
#include <chorus/route/codec_spec.hpp>

namespace chorus::codec {

// The codecs with device kernels (codec_list.hpp: describable); two-byte
// floats carry their overflow policy, block codecs their block.
template <class C>
  requires describable<C>
codec_spec spec_of(const C& c) {
  if constexpr (requires { c.policy(); })
    return {C::name, 1, c.policy() == overflow::saturate};
  else
    return {C::name, c.granule(), true};
}

// Calls visit(codec) with the codec `spec` names; false when it names none.
template <class Visit>
bool visit_spec(const codec_spec& spec, Visit&& visit) {
  bool found = false;
  codecs::for_each([&]<class C>() {
    if constexpr (describable<C>) {
      if (found || spec.name != C::name) return;
      if constexpr (requires(const C& c) { c.policy(); }) {
        visit(C(spec.saturate ? overflow::saturate : overflow::infinity));
        found = true;
      } else if (spec.block > 0) {
        visit(C(spec.block));
        found = true;
      }
    }
  });
  return found;
}

}  // namespace chorus::codec
