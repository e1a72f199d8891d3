// chorus::error as Python sees it: an instance of the chorus.Error subclass
// of its category (chorus/errors.py), with the category, rank, peer,
// operation and detail as attributes.
#include "binding.hpp"

#include <nanobind/stl/string.h>

#include <Python.h>

namespace chorus::python {

namespace {

const char* class_name(errc category) {
  switch (category) {
    case errc::timeout: return "TimeoutError";
    case errc::peer_failure: return "PeerFailure";
    case errc::invalid_argument: return "InvalidArgument";
    case errc::mismatch: return "Mismatch";
    case errc::transport: return "TransportError";
    case errc::unavailable: return "Unavailable";
  }
  return "Error";
}

nb::object exception_object(const error& failure) {
  nb::object errors = nb::module_::import_("chorus.errors");
  nb::object made = errors.attr(class_name(failure.category()))(failure.what());
  made.attr("category") = std::string(to_string(failure.category()));
  made.attr("rank") = failure.rank();
  made.attr("peer") = failure.peer();
  made.attr("operation") = failure.operation();
  made.attr("detail") = failure.detail();
  return made;
}

bool finalizing() {
#if PY_VERSION_HEX >= 0x030D0000
  return Py_IsFinalizing() != 0;
#else
  return _Py_IsFinalizing() != 0;
#endif
}

}  // namespace

nb::object exception_for(const std::exception_ptr& failure) {
  try {
    std::rethrow_exception(failure);
  } catch (const error& known) {
    return exception_object(known);
  } catch (const std::exception& other) {
    return nb::module_::import_("chorus.errors").attr("Error")(other.what());
  } catch (...) {
    return nb::module_::import_("chorus.errors").attr("Error")("unknown C++ exception");
  }
}

std::shared_ptr<nb::object> share_callable(nb::object callable) {
  return std::shared_ptr<nb::object>(new nb::object(std::move(callable)), [](nb::object* held) {
    if (finalizing()) return;  // the interpreter is going: leave the reference
    nb::gil_scoped_acquire gil;
    delete held;
  });
}

void call_back(const std::shared_ptr<nb::object>& callback, const std::exception_ptr& failure) {
  if (!callback || !callback->is_valid() || callback->is_none() || finalizing()) return;
  nb::gil_scoped_acquire gil;
  try {
    if (failure)
      (*callback)(exception_for(failure));
    else
      (*callback)(nb::none());
  } catch (nb::python_error& raised) {
    raised.discard_as_unraisable("chorus: a completion callback");
  }
}

void bind_errors(nb::module_&) {
  nb::register_exception_translator([](const std::exception_ptr& failure, void*) {
    try {
      std::rethrow_exception(failure);
    } catch (const error& known) {
      const nb::object made = exception_object(known);
      PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(made.ptr())), made.ptr());
    }
  });
}

}  // namespace chorus::python
