// What the files of the chorus extension (chorus._chorus) share: the
// communicator as Python holds it, DLPack arrays as chorus sees them, and
// the hooks each file uses to add its part of the module.
//
// Conventions of the whole binding:
// - every call that can block releases the GIL (nb::gil_scoped_release)
//   around the chorus call, and only there: arrays are read before;
// - arrays are taken as they are, never converted or copied: a
//   non-contiguous view, a device array or a type chorus lacks is a
//   chorus.InvalidArgument naming the argument, and nothing is written;
// - chorus::error becomes the chorus.Error subclass of its category
//   (errors.cpp; the classes live in chorus/errors.py).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <chorus/collective/nonblocking.hpp>
#include <chorus/comm/background.hpp>
#include <chorus/comm/ucx_communicator.hpp>
#include <chorus/core/algorithm.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>
#include <chorus/nccl/communicator.hpp>
#include <chorus/window/window_request.hpp>

#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace chorus::python {

namespace nb = nanobind;

// Arrays are taken as Python objects (kept referenced by non-blocking
// calls) and viewed through DLPack without conversion.
using array = nb::ndarray<>;
using const_array = nb::ndarray<nb::ro>;

// One DLPack array as chorus sees it: its element type, contiguous bytes
// and element count. A bool array travels as bytes (`boolean` set), so the
// reductions turn sum/max into "or" and prod/min into "and". `device`:
// CUDA memory, which only chorus's front doors (routed) may touch.
struct buffer {
  dtype type = dtype::uint8;
  bool boolean = false;
  bool device = false;
  std::byte* data = nullptr;
  std::size_t count = 0;

  template <class T>
  std::span<T> as() const {
    return {reinterpret_cast<T*>(data), count};
  }
  std::size_t bytes() const { return count * size_of(type); }
};

// Where an argument may live: in host memory only (the arguments the
// binding or a scheme reads on the host), or on the process's GPU too (the
// collectives' and point-to-point calls': chorus's front doors route them,
// devices.cpp).
enum class memory { host, host_or_device };

// Checks an array (C-contiguous, a type chorus has, writable for outputs,
// in memory `where` allows) and views it; `role` names the argument in the
// error ("tensor", "output"). The view is valid while `given` lives.
buffer writable(nb::handle given, std::string_view role, std::string_view operation, memory where = memory::host);
buffer readable(nb::handle given, std::string_view role, std::string_view operation, memory where = memory::host);

// A device array's first sight (devices.cpp): checks it is on the
// process's device, and installs the router for every front door on
// first use. Unavailable where there is no GPU or no CUDA in this build.
void take_device_array(const void* data, std::size_t bytes, int device_index, std::string_view role,
                       std::string_view operation);
// The fake device chorus._testing installed, or null (devices.cpp).
struct device_handoff;
const device_handoff* installed_test_device();
// The process's device: chosen (chorus.cuda.use_device, a device array, an
// NCCL communicator), or not yet; choosing another is InvalidArgument.
std::optional<int> process_device();
void use_process_device(int index, std::string_view operation);
// An input and an output of one call must have the same element type.
void require_same_type(const buffer& a, const buffer& b, std::string_view operation);

// The `algo=` argument of `collective`: automatic, or an algorithm it offers.
algorithm algorithm_named(const std::string& name, std::string_view collective);

// A new NumPy array that owns its floats (a copy, or the vector moved in).
using float_array = nb::ndarray<nb::numpy, float, nb::ndim<1>>;
float_array numpy_array(std::vector<float> values);
float_array numpy_array(std::span<const float> values);

// The communicator behind a chorus.Communicator. Copies share the world.
struct py_communicator {
  chorus::communicator comm;
  std::string last_algorithm = "none";  // what the last blocking collective of this object ran
  // Completes non-blocking point-to-point requests in order (wait, then the
  // callback), so each request's arrays and callback live until it is done.
  std::shared_ptr<background_worker> completions;

  py_communicator() = default;
  explicit py_communicator(chorus::communicator given) : comm(std::move(given)) {}
  py_communicator(const py_communicator&) = delete;
  py_communicator& operator=(const py_communicator&) = delete;
  ~py_communicator();  // closes, without the GIL: queued callbacks need it

  chorus::communicator& get(std::string_view operation);  // an error once closed
  background_worker& completion_thread();
  void close();  // finishes what is queued, then leaves the job
};

// An NCCL communicator made from a chorus one (nccl.cpp): device arrays go
// through NCCL on the caller's stream, host arrays through its own chorus
// communicator. The collectives and point-to-point calls are bound on it
// from the same code as on py_communicator (the `Holder` of the bind
// functions: get(operation), last_algorithm).
struct py_nccl_communicator {
  nccl::communicator comm;
  std::string last_algorithm = "none";
  // Sends and receives queued by isend/irecv (their arrays kept), posted as
  // one NCCL group by the next wait.
  std::vector<nccl::communicator::request> queued;
  std::vector<nb::object> queued_arrays;

  explicit py_nccl_communicator(nccl::communicator made) : comm(std::move(made)) {}
  ~py_nccl_communicator();  // closes without the GIL: finalizing is bounded, but waits
  nccl::communicator& get(std::string_view operation);
  void close();
};

// A non-blocking operation as chorus.Request holds it: done when its task
// on a chorus thread has run (the collective, or the wait of a send or
// receive), or when its window operation completes. test() and wait()
// raise the operation's error.
class pending_request {
 public:
  explicit pending_request(collective_request done, std::shared_ptr<std::atomic<int>> source = {})
      : done_(std::move(done)), source_(std::move(source)) {}
  // `keep`: the array a window operation writes into until it completes.
  pending_request(window_request done, nb::object keep) : done_(std::move(done)), keep_(std::move(keep)) {}
  pending_request(const pending_request&) = delete;
  pending_request& operator=(const pending_request&) = delete;
  ~pending_request();  // an unfinished operation writing into `keep` is waited for first
  bool test();
  void wait();
  // A receive from any source: the sender's rank once done, else -1.
  int source() const { return source_ ? source_->load() : -1; }

 private:
  void settle(const std::function<void()>& step);
  std::variant<collective_request, window_request> done_;
  nb::object keep_;
  std::shared_ptr<std::atomic<int>> source_;
  bool finished_ = false;
  std::exception_ptr failure_;
};

// What a non-blocking call starts: `work` on a communicator, run by the
// communicator's background thread in call order (collectives) or by its
// completion thread (the waits of point-to-point requests already posted).
// `keep` (the arrays) stays referenced until the work is done; `callback`,
// if not None, is then called with None or the exception.
using work_on = std::function<void(chorus::communicator&)>;
std::unique_ptr<pending_request> start_collective(py_communicator& self, const char* operation, work_on work,
                                                  nb::object keep, nb::object callback);
std::unique_ptr<pending_request> start_completion(py_communicator& self, const char* operation, work_on work,
                                                  nb::object keep, nb::object callback,
                                                  std::shared_ptr<std::atomic<int>> source = {});
// On an NCCL communicator a non-blocking call runs at once (NCCL's stream
// is where it overlaps: the call returns once the stream has done it), and
// its Request is complete when returned; the callback is called before.
using nccl_work_on = std::function<void(nccl::communicator&)>;
std::unique_ptr<pending_request> start_collective(py_nccl_communicator& self, const char* operation, nccl_work_on work,
                                                  nb::object keep, nb::object callback);

// The chorus communicator that waits for a call's local copies (an NCCL
// communicator's host side).
inline chorus::communicator& host_of(chorus::communicator& comm) { return comm; }
inline chorus::communicator& host_of(nccl::communicator& comm) { return comm.host(); }

// Where a call runs: on `comm`, or, for what an NCCL communicator has no
// form for (NcclHasIt false: bitwise ops, codecs on broadcast and
// allgather), over the NCCL communicator's chorus communicator, which
// stages device arrays as a chorus communicator does.
template <bool NcclHasIt, class Comm>
auto& runs_on(Comm& comm) {
  if constexpr (std::is_same_v<Comm, nccl::communicator> && !NcclHasIt)
    return comm.host();
  else
    return comm;
}

// Releases the GIL around a blocking chorus call.
template <class Call>
decltype(auto) without_gil(Call&& call) {
  nb::gil_scoped_release released;
  return std::forward<Call>(call)();
}

// Runs `call` without the GIL whether or not this thread holds it: a
// destructor that closes (and so waits) runs under the collector, with the
// GIL, or on a chorus thread, without.
template <class Call>
void without_gil_if_held(Call&& call) {
  if (PyGILState_Check()) {
    nb::gil_scoped_release released;
    std::forward<Call>(call)();
  } else {
    std::forward<Call>(call)();
  }
}

// Builds the exception object for a chorus::error (errors.cpp), for the
// completion callbacks of non-blocking calls.
nb::object exception_for(const std::exception_ptr& failure);

// Runs a Python completion callback from a chorus thread: takes the GIL,
// passes None or the exception, and reports (never propagates) what the
// callback raises. Nothing runs once the interpreter is finalizing.
void call_back(const std::shared_ptr<nb::object>& callback, const std::exception_ptr& failure);

// Shares a Python callable with a chorus thread: the reference is dropped
// under the GIL, whichever thread drops it last.
std::shared_ptr<nb::object> share_callable(nb::object callable);

void bind_errors(nb::module_& m);
void bind_devices(nb::module_& m);
void bind_communicator(nb::module_& m, nb::class_<py_communicator>& communicator);
void bind_reductions(nb::class_<py_communicator>& communicator);
void bind_reductions(nb::class_<py_nccl_communicator>& communicator);
void bind_movements(nb::class_<py_communicator>& communicator);
void bind_movements(nb::class_<py_nccl_communicator>& communicator);
void bind_point_to_point(nb::class_<py_communicator>& communicator);
void bind_nccl(nb::module_& m);
void bind_codecs(nb::module_& m);
void bind_averaging(nb::module_& m);
void bind_windows(nb::module_& m);
void bind_powersgd(nb::module_& m, nb::class_<py_communicator>& communicator);

}  // namespace chorus::python
