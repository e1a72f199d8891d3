// A codec as a plain description (core/memory_router.hpp: codec_spec), for
// interfaces that cannot be templates over the codec: the direct path's
// device arithmetic is told which codec to run through one.
//
//   const codec_spec spec = chorus::codec::spec_of(chorus::codec::int8{64});   // {"int8", 64, true}
//   chorus::codec::visit_spec(spec, [&](const auto& c) { ... c is int8{64} ... });
#pragma once

#include <chorus/codec/bf16.hpp>
#include <chorus/codec/fp16.hpp>
#include <chorus/codec/int8.hpp>
#include <chorus/codec/onebit.hpp>
#include <chorus/core/memory_router.hpp>

#include <type_traits>

namespace chorus::codec {

// The codecs a codec_spec can name: the ones with device kernels.
template <class C>
inline constexpr bool describable =
    std::is_same_v<C, fp16> || std::is_same_v<C, bf16> || std::is_same_v<C, int8> || std::is_same_v<C, onebit>;

template <class C>
  requires describable<C>
codec_spec spec_of(const C& c) {
  if constexpr (std::is_same_v<C, fp16> || std::is_same_v<C, bf16>)
    return {C::name, 1, c.policy() == overflow::saturate};
  else
    return {C::name, c.granule(), true};
}

// Calls visit(codec) with the codec `spec` names; false when it names none.
template <class Visit>
bool visit_spec(const codec_spec& spec, Visit&& visit) {
  const overflow policy = spec.saturate ? overflow::saturate : overflow::infinity;
  if (spec.name == fp16::name)
    visit(fp16(policy));
  else if (spec.name == bf16::name)
    visit(bf16(policy));
  else if (spec.name == int8::name && spec.block > 0)
    visit(int8(spec.block));
  else if (spec.name == onebit::name && spec.block > 0)
    visit(onebit(spec.block));
  else
    return false;
  return true;
}

}  // namespace chorus::codec
