// The one list of codecs. From it come every place that names them: by_name
// and visit (any_codec.hpp), any_error_feedback's states, the codecs a
// codec_spec can name (spec.hpp: those with device kernels), and the names
// in errors, chorus-perf's help and the Python binding. Adding a codec is
// its header (a type the `codec` concept accepts, codec.hpp) and one line
// here; a codec whose name carries settings ("topk:0.05") has
// `settings` (for help) and `from_settings(text, whole_name)`.
#pragma once

#include <chorus/codec/bf16.hpp>
#include <chorus/codec/fp16.hpp>
#include <chorus/codec/identity.hpp>
#include <chorus/codec/int8.hpp>
#include <chorus/codec/minifloat.hpp>
#include <chorus/codec/onebit.hpp>
#include <chorus/codec/randomk.hpp>
#include <chorus/codec/topk.hpp>

#include <string>
#include <string_view>

namespace chorus::codec {

template <class... Codecs>
struct codec_list {
  // T<Codecs...>: a variant of their states, a visitor over them.
  template <template <class...> class T>
  using apply = T<Codecs...>;

  template <class Each>
  static void for_each(Each&& each) {
    (each.template operator()<Codecs>(), ...);
  }
};

using codecs = codec_list<identity, fp16, bf16, int8, fp8_e4m3, fp8_e5m2, fp4_e2m1, onebit, topk, randomk>;

// Whether a codec_spec can name C: cuda/kernels.cuh has its kernels.
template <class C>
inline constexpr bool describable = requires { C::device_kernels; };

// "identity, fp16, bf16, int8, fp8_e4m3, fp8_e5m2, fp4_e2m1, onebit, topk[:R], randomk[:R[:SEED]]"; with
// `device_only`, the codecs with device kernels.
inline std::string codec_names(bool device_only = false) {
  std::string names;
  codecs::for_each([&]<class C>() {
    if (device_only && !describable<C>) return;
    names += (names.empty() ? "" : ", ") + std::string(C::name);
    if constexpr (requires { C::settings; }) names += C::settings;
  });
  return names;
}

}  // namespace chorus::codec
