// chorus.init(), chorus.connect() (the torch backend's way in: rank and
// size from torch, the store's address through torch's store), the
// communicator's own calls (rank, size, barrier, split, close) and
// chorus.Request, the handle of every non-blocking call.
#include "binding.hpp"

#include <chorus/collective/barrier/monitored_barrier.hpp>
#include <chorus/comm/connect.hpp>
#include <chorus/record/dump.hpp>

#include <nanobind/stl/function.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/unique_ptr.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

namespace chorus::python {

chorus::communicator& py_communicator::get(std::string_view operation) {
  if (!comm.valid())
    throw error(errc::invalid_argument, "the communicator is closed", {-1, -1, std::string(operation)});
  return comm;
}

background_worker& py_communicator::completion_thread() {
  if (!completions) completions = std::make_shared<background_worker>();
  return *completions;
}

py_communicator::~py_communicator() {
  without_gil_if_held([this] { close(); });
}

void py_communicator::close() {
  completions.reset();  // its waits are bounded by the timeout
  comm = {};
}

bool pending_request::test() {
  if (!finished_)
    settle([&] { finished_ = without_gil([&] { return std::visit([](auto& r) { return r.test(); }, done_); }); });
  return finished_;
}

void pending_request::wait() {
  if (!finished_)
    settle([&] {
      without_gil([&] { std::visit([](auto& r) { r.wait(); }, done_); });
      finished_ = true;
    });
}

pending_request::~pending_request() {
  if (finished_ || !keep_.is_valid()) return;
  try {
    without_gil([&] { std::get<window_request>(done_).wait(); });
  } catch (...) {  // its error had no one left to tell
  }
}

// The operation's outcome is kept: a request that failed fails again.
void pending_request::settle(const std::function<void()>& step) {
  if (failure_) std::rethrow_exception(failure_);
  try {
    step();
  } catch (...) {
    failure_ = std::current_exception();
    finished_ = true;
    throw;
  }
}

namespace {

// Runs `work`, then the callback with its outcome; the task holds the
// arrays and the callback until both have run.
std::function<void(chorus::communicator&)> completing(work_on work, nb::object keep, nb::object callback) {
  return [work = std::move(work), kept = share_callable(std::move(keep)),
          told = share_callable(std::move(callback))](chorus::communicator& c) {
    std::exception_ptr failure;
    try {
      work(c);
    } catch (...) {
      failure = std::current_exception();
    }
    call_back(told, failure);
    if (failure) std::rethrow_exception(failure);
  };
}

}  // namespace

std::unique_ptr<pending_request> start_collective(py_communicator& self, const char* operation, work_on work,
                                                  nb::object keep, nb::object callback) {
  chorus::communicator& comm = self.get(operation);
  collective_request started = collective::start(
      comm, record::collective(operation), completing(std::move(work), std::move(keep), std::move(callback)), false);
  return std::make_unique<pending_request>(std::move(started));
}

std::unique_ptr<pending_request> start_completion(py_communicator& self, const char* operation, work_on work,
                                                  nb::object keep, nb::object callback,
                                                  std::shared_ptr<std::atomic<int>> source) {
  chorus::communicator comm = self.get(operation);
  auto task = completing(std::move(work), std::move(keep), std::move(callback));
  std::future<void> done = self.completion_thread().submit([comm, task]() mutable { task(comm); });
  return std::make_unique<pending_request>(collective_request(std::move(done), comm.timeout(), operation),
                                           std::move(source));
}

namespace {

options options_from(std::optional<double> timeout_s, std::optional<std::string> progress, std::optional<bool> check) {
  options given;
  if (timeout_s) {
    if (!(*timeout_s > 0) || !std::isfinite(*timeout_s))
      throw error(errc::invalid_argument, "timeout must be a positive number of seconds", {-1, -1, "init"});
    given.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(*timeout_s * 1000.0)));
  }
  if (progress) {
    // The names CHORUS_PROGRESS takes, in progress_mode's order; "auto" (last) leaves the choice to chorus.
    const auto& names = variables::progress_choices;
    const auto found = std::find(names.begin(), names.end(), *progress);
    if (found == names.end())
      throw error(errc::invalid_argument, "progress must be spin, yield, block or auto, not '" + *progress + "'",
                  {-1, -1, "init"});
    if (*found != "auto") given.progress = static_cast<transport::progress_mode>(found - names.begin());
  }
  given.check = check;
  return given;
}

py_communicator* made(chorus::communicator comm) { return new py_communicator(std::move(comm)); }

}  // namespace

namespace {

// A journal's dump (record/dump.hpp), as text.
std::string journal_text(const record::journal& book) {
  char* text = nullptr;
  std::size_t length = 0;
  std::FILE* out = ::open_memstream(&text, &length);
  if (out == nullptr) throw error(errc::unavailable, "no memory for the flight record", {-1, -1, "record_json"});
  record::detail::write_journal(out, book, "request");
  std::fclose(out);
  std::string written(text, length);
  std::free(text);
  return written;
}

}  // namespace

void bind_communicator(nb::module_& m, nb::class_<py_communicator>& communicator) {
  m.def(
      "record_as",
      [](const std::string& name) {
        const std::string before(record::caller_name().view());
        record::caller_name() = std::string_view(name);
        return before;
      },
      nb::arg("name"),
      "The calls this thread makes from now on are recorded as `name` (the torch backend records torch's names); "
      "'' ends it. Returns the name set before.");
  m.def(
      "init",
      [](std::optional<double> timeout, std::optional<std::string> progress, std::optional<bool> check) {
        const options given = options_from(timeout, std::move(progress), check);
        return made(without_gil([&] { return chorus::init(given); }));
      },
      nb::arg("timeout") = nb::none(), nb::arg("progress") = nb::none(), nb::arg("check") = nb::none(),
      "Joins the job a launcher started (chorus-run, mpirun, srun: see the README).");

  m.def(
      "connect",
      [](int rank, int size, int local_size, std::string host, std::string token,
         std::function<void(std::string, int)> publish, std::function<std::string()> look_up,
         std::optional<double> timeout, std::optional<std::string> progress, std::optional<bool> check) {
        bootstrap::launch_info info;
        info.rank = rank;
        info.size = size;
        info.local_size = local_size;
        info.token = std::move(token);
        info.source = "given";
        if (rank < 0 || size < 1 || rank >= size)
          throw error(errc::invalid_argument, "rank " + std::to_string(rank) + " of " + std::to_string(size),
                      {rank, -1, "connect"});
        if (size > 1) {
          info.store = bootstrap::address{std::move(host), 0};
          info.rendezvous = bootstrap::store_rendezvous{
              [publish](const bootstrap::address& hosted) { publish(hosted.host, hosted.port); },
              [look_up] { return bootstrap::parse_address(look_up(), "the store address published by rank 0"); }};
        }
        const options given = options_from(timeout, std::move(progress), check);
        return made(without_gil([&] { return chorus::connect(info, given); }));
      },
      nb::arg("rank"), nb::arg("size"), nb::arg("local_size"), nb::arg("host"), nb::arg("token"), nb::arg("publish"),
      nb::arg("look_up"), nb::arg("timeout") = nb::none(), nb::arg("progress") = nb::none(),
      nb::arg("check") = nb::none(),
      "Joins a job whose ranks learn where the store is through another key-value store: rank 0 hosts "
      "chorus's store on a free port of `host` and calls publish(host, port); the others call look_up() "
      "for 'host:port'. The torch backend passes torch's store.");

  m.def(
      "join",
      [](std::string address, std::string token, int size, std::optional<double> timeout,
         std::optional<std::string> progress, std::optional<bool> check) {
        bootstrap::launch_info info;
        info.joining = true;
        info.rank = -1;
        info.size = size;
        info.local_size = size;
        info.token = std::move(token);
        info.store = bootstrap::parse_address(address, "the running job's store address");
        info.launcher_hosts_store = true;  // a joiner never hosts it
        info.source = "chorus.join";
        if (size < 1)
          throw error(errc::invalid_argument, "the running job's size must be at least 1", {-1, -1, "join"});
        const options given = options_from(timeout, std::move(progress), check);
        return made(without_gil([&] { return chorus::connect(info, given); }));
      },
      nb::arg("address"), nb::arg("token"), nb::arg("size"), nb::arg("timeout") = nb::none(),
      nb::arg("progress") = nb::none(), nb::arg("check") = nb::none(),
      "Joins a running job of `size` ranks whose store is at `address` ('host:port'), taking the next free rank.");

  communicator.def_prop_ro("rank", [](py_communicator& self) { return self.get("rank").rank(); })
      .def_prop_ro(
          "joined", [](py_communicator& self) { return self.get("joined").joined(); },
          "Whether this process joined the job while it ran (its asynchronous schemes admit it).")
      .def_prop_ro("size", [](py_communicator& self) { return self.get("size").size(); })
      .def_prop_ro(
          "timeout", [](py_communicator& self) { return self.get("timeout").timeout().count() / 1000.0; },
          "Seconds every wait of this communicator is bounded by.")
      .def_prop_ro("closed", [](py_communicator& self) { return !self.comm.valid(); })
      .def_ro("last_algorithm", &py_communicator::last_algorithm,
              "The algorithm the last blocking collective called on this object ran.")
      .def("barrier", [](py_communicator& self) { without_gil([&] { self.get("barrier").barrier(); }); })
      .def(
          "ibarrier",
          [](py_communicator& self, nb::object callback) {
            return start_collective(
                self, "ibarrier", [](chorus::communicator& c) { c.barrier(); }, nb::none(), std::move(callback));
          },
          nb::arg("callback").none() = nb::none(), "barrier started on the background thread; returns a Request.")
      .def(
          "monitored_barrier",
          [](py_communicator& self, double timeout_s, bool wait_all) {
            chorus::communicator& comm = self.get("monitored_barrier");
            if (!(timeout_s >= 0) || !std::isfinite(timeout_s))
              throw error(errc::invalid_argument, "timeout must be a number of seconds, 0 or more",
                          {comm.transport().rank(), -1, "monitored_barrier"});
            const auto limit = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(timeout_s * 1000.0)));
            without_gil([&] { chorus::monitored_barrier(comm, limit, {.wait_all = wait_all}); });
          },
          nb::arg("timeout"), nb::arg("wait_all") = false,
          "A barrier that names the ranks that did not arrive within `timeout` seconds (rank 0 waits for "
          "them; with wait_all, for every one).")
      .def(
          "split",
          [](py_communicator& self, int color, int key) {
            chorus::communicator& comm = self.get("split");
            return made(without_gil([&] { return comm.split(color, key); }));
          },
          nb::arg("color"), nb::arg("key"),
          "Collective: the ranks that pass the same color form a communicator, ordered by key; a negative "
          "color gets a closed one.")
      .def_prop_ro(
          "record_id",
          [](py_communicator& self) {
            const record::target where = self.get("record_id").recorder();
            return where.on == nullptr ? -1 : static_cast<std::int64_t>(where.on->id());
          },
          "This communicator's id in the flight record, or -1 when nothing is recorded.")
      .def(
          "record_json",
          [](py_communicator& self) -> std::optional<std::string> {
            record::journal* book = self.get("record_json").journal();
            if (book == nullptr || !book->enabled()) return std::nullopt;
            return without_gil([&] { return journal_text(*book); });
          },
          "This rank's flight record as the JSON of its dump, or None when CHORUS_RECORD=0.")
      .def(
          "record_dump",
          [](py_communicator& self) -> std::optional<std::string> {
            record::journal* book = self.get("record_dump").journal();
            if (book == nullptr || !book->enabled()) return std::nullopt;
            const std::filesystem::path written = without_gil([&] { return record::dump(*book, "request"); });
            if (written.empty())
              throw error(errc::unavailable, "could not write the flight record (see stderr)",
                          {self.comm.transport().rank(), -1, "record_dump"});
            return written.string();
          },
          "Writes this rank's flight record (CHORUS_RECORD_DIR, else a directory of the job under /tmp) and "
          "returns its path; None when CHORUS_RECORD=0.")
      .def(
          "close", [](py_communicator& self) { without_gil([&] { self.close(); }); },
          "Finishes the queued non-blocking work and leaves the job (bounded by the timeout).");

  nb::class_<pending_request>(m, "Request", "A non-blocking operation started by an i* call.")
      .def("test", &pending_request::test, "True once done; raises the operation's error.")
      .def("wait", &pending_request::wait, "Waits until done (bounded); raises the operation's error.")
      .def_prop_ro("source", &pending_request::source,
                   "For a receive from any source: the sender's rank once done, else -1.");
}

}  // namespace chorus::python
