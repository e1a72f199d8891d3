// chorus._chorus: the extension behind the chorus package. Each part of the
// module is bound in its own file (binding.hpp lists them).
#include "binding.hpp"

NB_MODULE(_chorus, m) {
  using namespace chorus::python;
  m.doc() = "chorus: collectives, codecs and averaging schemes over UCX (the C++ extension; import chorus)";
  // torch keeps process groups (and so communicators) until after the
  // interpreter's end; nanobind would report them as leaks.
  nb::set_leak_warnings(false);
  bind_errors(m);
  bind_devices(m);
  nb::class_<py_communicator> communicator(m, "Communicator", "A group of ranks that run collectives together.");
  bind_communicator(m, communicator);
  bind_reductions(communicator);
  bind_movements(communicator);
  bind_point_to_point(communicator);
  bind_codecs(m);
  bind_averaging(m);
  bind_windows(m);
  bind_powersgd(m, communicator);
  bind_nccl(m);
}
