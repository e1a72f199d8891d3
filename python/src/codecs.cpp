// chorus.Codec and chorus.ErrorFeedback; encode and decode on float32
// arrays, for users who move the bytes themselves (and for the tests).
#include "codecs.hpp"

#include <chorus/compressed/error_bound.hpp>

#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <optional>
#include <string>
#include <type_traits>

namespace chorus::python {

namespace {

// A block codec (int8, onebit: constructible from a block size, not sparse) takes block=.
template <class C>
constexpr bool takes_block = std::is_constructible_v<C, std::size_t> && !codec::sparse<C>;

codec::any_codec codec_named(const std::string& name, std::optional<std::size_t> block) {
  if (!block) return codec::by_name(name);
  if (*block == 0) throw error(errc::invalid_argument, "a codec's block must be at least 1 element");
  std::optional<codec::any_codec> made;
  std::string with_blocks;
  codec::codecs::for_each([&]<class C>() {
    if constexpr (takes_block<C>) {
      with_blocks += (with_blocks.empty() ? "" : " and ") + std::string(C::name);
      if (C::name == name) made = codec::any_codec(C(*block));
    }
  });
  if (!made) throw error(errc::invalid_argument, "codec '" + name + "' takes no block (" + with_blocks + " do)");
  return *made;
}

std::span<const float> floats_in(nb::handle given, const char* role, const char* operation) {
  const buffer seen = readable(given, role, operation);
  if (seen.type != dtype::float32 || seen.boolean)
    throw error(errc::invalid_argument, std::string(role) + " must be float32", {-1, -1, operation});
  return seen.as<const float>();
}

std::span<std::byte> bytes_out(nb::handle given, std::size_t needed, const char* operation) {
  const buffer seen = writable(given, "output", operation);
  if (seen.type != dtype::uint8 || seen.boolean || seen.count != needed)
    throw error(errc::invalid_argument, "output must be a uint8 array of " + std::to_string(needed) + " bytes",
                {-1, -1, operation});
  return {seen.data, seen.count};
}

}  // namespace

codec_choice codec_choice::from(nb::handle given, std::string_view operation) {
  codec_choice chosen;
  if (given.is_none()) return chosen;
  if (nb::isinstance<nb::str>(given)) {
    chosen.wire = codec::by_name(nb::cast<std::string>(given));
  } else if (py_codec* held = nullptr; nb::try_cast(given, held, false) && held) {
    chosen.wire = held->wire;
  } else if (py_feedback* fed = nullptr; nb::try_cast(given, fed, false) && fed) {
    chosen.feedback = fed;
  } else {
    throw error(errc::invalid_argument, "codec must be None, a name, a chorus.Codec or a chorus.ErrorFeedback",
                {-1, -1, std::string(operation)});
  }
  return chosen;
}

void require_codec_input(const buffer& seen, std::string_view operation) {
  if (seen.type != dtype::float32 || seen.boolean)
    throw error(errc::invalid_argument, "a codec compresses float32 arrays, not " + std::string(to_string(seen.type)),
                {-1, -1, std::string(operation)});
}

void bind_codecs(nb::module_& m) {
  static const std::string codec_doc = "A codec with its settings: none, " + codec::codec_names() + ".";
  nb::class_<py_codec>(m, "Codec", codec_doc.c_str())
      .def(
          "__init__",
          [](py_codec* self, const std::string& name, std::optional<std::size_t> block) {
            new (self) py_codec{codec_named(name, block)};
          },
          nb::arg("name"), nb::arg("block") = nb::none())
      .def_prop_ro("name", [](const py_codec& self) { return std::string(self.wire.name()); })
      .def(
          "encoded_bytes", [](const py_codec& self, std::size_t n) { return self.wire.encoded_bytes(n); }, nb::arg("n"),
          "Bytes that n float32 values take on the wire.")
      .def(
          "encode",
          [](const py_codec& self, nb::handle values, nb::handle output) {
            const auto in = floats_in(values, "values", "encode");
            self.wire.encode(in, bytes_out(output, self.wire.encoded_bytes(in.size()), "encode"));
          },
          nb::arg("values"), nb::arg("output"), "Encodes float32 `values` into the uint8 array `output`.")
      .def(
          "decode",
          [](const py_codec& self, nb::handle encoded, nb::handle output) {
            const buffer out = writable(output, "output", "decode");
            const buffer in = readable(encoded, "encoded", "decode");
            if (out.type != dtype::float32 || out.boolean || in.type != dtype::uint8 ||
                in.count != self.wire.encoded_bytes(out.count))
              throw error(errc::invalid_argument,
                          "decode takes the uint8 bytes of len(output) values and a float32 output",
                          {-1, -1, "decode"});
            self.wire.decode({in.data, in.count}, out.as<float>());
          },
          nb::arg("encoded"), nb::arg("output"), "Decodes `encoded` into the float32 array `output`.")
      .def("__repr__", [](const py_codec& self) { return "chorus.Codec('" + std::string(self.wire.name()) + "')"; });

  m.def(
      "allreduce_error_bound",
      [](nb::handle codec, nb::handle contributions) {
        const codec_choice chosen = codec_choice::from(codec, "allreduce_error_bound");
        if (!chosen.active() || chosen.feedback)
          throw error(errc::invalid_argument, "allreduce_error_bound takes a codec (a name or chorus.Codec)");
        const_array rows;
        if (!nb::try_cast(contributions, rows, false) || rows.ndim() != 2)
          throw error(errc::invalid_argument, "contributions must be a 2-d float32 array: one row per rank");
        const buffer all = readable(contributions, "contributions", "allreduce_error_bound");
        if (all.type != dtype::float32 || all.boolean)
          throw error(errc::invalid_argument, "contributions must be float32");
        const std::size_t ranks = rows.shape(0), count = rows.shape(1);
        std::vector<std::vector<float>> parts(ranks);
        for (std::size_t r = 0; r < ranks; ++r)
          parts[r].assign(all.as<const float>().data() + r * count, all.as<const float>().data() + (r + 1) * count);
        return numpy_array(chosen.visit_codec(
            [&](const auto& coder) { return compressed::allreduce_error_bound(coder, std::span(parts)); }));
      },
      nb::arg("codec"), nb::arg("contributions"),
      "Per element, the bound on |compressed allreduce (sum) - exact sum| that chorus states, for these "
      "contributions (row r: rank r's); divide by the rank count for op avg.");

  nb::class_<py_feedback>(m, "ErrorFeedback",
                          "A codec that keeps what it lost and adds it to the next call: one per tensor.")
      .def(
          "__init__",
          [](py_feedback* self, nb::handle codec, std::optional<std::size_t> block) {
            codec::any_codec wire;
            if (nb::isinstance<nb::str>(codec))
              wire = codec_named(nb::cast<std::string>(codec), block);
            else
              wire = nb::cast<py_codec&>(codec).wire;
            if (!wire) throw error(errc::invalid_argument, "error feedback needs a codec, not 'none'");
            new (self) py_feedback{codec::any_error_feedback(wire), std::string(wire.name())};
          },
          nb::arg("codec"), nb::arg("block") = nb::none())
      .def_ro("name", &py_feedback::name)
      .def(
          "residual",
          [](const py_feedback& self) {
            const auto kept = self.state.visit([](const auto& state) { return state.residual(0); });
            return std::vector<float>(kept.begin(), kept.end());
          },
          "A copy of the residual carried to the next call (slot 0).")
      .def(
          "reset", [](py_feedback& self) { self.state.visit([](auto& state) { state.reset(); }); },
          "Forgets the residual.");
}

}  // namespace chorus::python
