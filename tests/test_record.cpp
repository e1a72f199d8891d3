// The flight recorder (record/): the ring keeps the last entries whole and
// numbers collectives alike on every rank; front doors record what they
// ran (name, type, count, op, algorithm, path, state); nested calls and
// non-blocking ones are one entry each; a failure is kept with its text;
// the dump is one JSON file per rank.
#include <chorus/averaging.hpp>
#include <chorus/chorus.hpp>
#include <chorus/core/version.hpp>
#include <chorus/record/dump.hpp>
#include <chorus/record/trace.hpp>
#include <chorus/window.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

using chorus::record::entry;
using chorus::record::kind;
using chorus::record::state;

namespace {

entry written(std::string_view name, kind what) {
  entry made;
  made.call.what = what;
  made.call.name = name;
  return made;
}

// The entries of `comm`'s ring.
std::vector<entry> entries_of(const chorus::communicator& comm) { return comm.recorder().on->snapshot(); }

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

TEST_CASE("the ring keeps the last entries, oldest first, and numbers only collectives") {
  chorus::record::ring ring(0, {0, 1}, 0, 3);  // rounded up to 4
  CHECK(ring.capacity() == 4);
  for (int i = 0; i < 6; ++i) {
    entry made = written(i % 2 == 0 ? "allreduce" : "send", i % 2 == 0 ? kind::collective : kind::point_to_point);
    ring.post(made);
    made.status = state::completed;
    made.algorithm = "ring";
    ring.update(made);
  }
  const std::vector<entry> kept = ring.snapshot();
  REQUIRE(kept.size() == 4);
  CHECK(kept.front().index == 2);
  CHECK(kept.back().index == 5);
  CHECK(kept[0].sequence == 2);  // collectives 0, 2, 4 took 1, 2, 3
  CHECK(kept[1].sequence == 0);
  CHECK(kept[2].sequence == 3);
  for (const entry& e : kept) {
    CHECK(e.status == state::completed);
    CHECK(e.algorithm.view() == "ring");
  }
  // An update of an entry whose slot was reused since changes nothing.
  entry stale = kept[0];
  stale.index = 1;
  stale.algorithm = "tree";
  ring.update(stale);
  for (const entry& e : ring.snapshot()) CHECK(e.algorithm.view() == "ring");
}

TEST_CASE("short names are cut, never overrun") {
  const chorus::record::short_name<8> name("a_very_long_operation_name");
  CHECK(name.view() == "a_very_");
}

TEST_CASE("collectives are recorded alike on every rank, with what ran") {
  std::mutex mutex;
  std::vector<std::vector<entry>> all(3);
  chorus::run_threads(3, [&](chorus::communicator& comm) {
    std::vector<float> grads(1000, 1.0f);
    std::vector<double> small(1, 2.0);
    chorus::allreduce(comm, grads);
    chorus::allreduce(comm, small, chorus::op::max{});
    chorus::broadcast(comm, std::span(grads), 1);
    std::vector<float> input(7, 1.0f), output(7);
    chorus::allreduce(comm, std::span<const float>(input), std::span(output));  // out of place: one entry
    auto pending = chorus::iallreduce(comm, std::span(grads));
    pending.wait();
    comm.barrier();
    if (comm.rank() == 0) comm.send(std::span(small), 2, 5);
    if (comm.rank() == 2) comm.recv(std::span(small), 0, 5);
    std::lock_guard lock(mutex);
    all[static_cast<std::size_t>(comm.rank())] = entries_of(comm);
  });
  std::vector<std::string> names;
  for (const entry& e : all[0])
    if (e.call.what == kind::collective) names.emplace_back(e.call.name.view());
  CHECK(names == std::vector<std::string>{"barrier", "allreduce", "allreduce", "broadcast", "allreduce", "iallreduce",
                                          "barrier"});
  for (const auto& entries : all) {
    std::uint64_t sequence = 0;
    for (const entry& e : entries) {
      CHECK(e.status == state::completed);
      CHECK(e.posted <= e.started);
      CHECK(e.started <= e.ended);
      if (e.call.what != kind::collective) continue;
      CHECK(e.sequence == ++sequence);
      if (e.call.name.view() == "allreduce" || e.call.name.view() == "broadcast") CHECK(!e.algorithm.empty());
    }
  }
  const entry& first = all[1][1];  // after connect()'s barrier
  CHECK(first.call.name.view() == "allreduce");
  CHECK(first.call.count == 1000);
  CHECK(first.call.bytes == 4000);
  CHECK(first.call.type == chorus::dtype::float32);
  CHECK(first.call.op.view() == "sum");
  // Host memory: the path says whether it went through shared memory.
  CHECK(first.where ==
        (first.algorithm.view() == "shared_memory" ? chorus::record::path::shared_memory : chorus::record::path::host));
  const entry& second = all[1][2];
  CHECK(second.call.type == chorus::dtype::float64);
  CHECK(second.call.op.view() == "max");
  CHECK(all[1][3].call.root == 1);
  CHECK(all[1][5].nonblocking);
  CHECK(all[1][5].call.count == 1000);
  const entry& sent = all[0].back();
  CHECK(sent.call.what == kind::point_to_point);
  CHECK(sent.call.name.view() == "send");
  CHECK(sent.call.peer == 2);
  CHECK(all[2].back().call.name.view() == "recv");
  CHECK(all[2].back().call.peer == 0);
  CHECK(all[1].back().call.name.view() == "barrier");  // rank 1 sent and received nothing
}

TEST_CASE("a call that fails is recorded failed, with the error's text, and dumped") {
  const std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("chorus-test-record-" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  ::setenv("CHORUS_RECORD_DIR", directory.c_str(), 1);
  std::vector<std::string> texts(2);
  chorus::run_threads(2, [&](chorus::communicator& comm) {
    std::vector<float> data(4);
    CHECK_THROWS_AS(chorus::broadcast(comm, std::span(data), 5), chorus::error);  // root out of range
    const std::vector<entry> entries = entries_of(comm);
    CHECK(entries.back().status == state::failed);
    CHECK(entries.back().call.name.view() == "broadcast");
    CHECK(comm.journal()->failure().find("root 5") != std::string::npos);
    texts[static_cast<std::size_t>(comm.rank())] =
        read_file(directory / ("rank-" + std::to_string(comm.rank()) + ".json"));
  });
  ::unsetenv("CHORUS_RECORD_DIR");
  for (int rank = 0; rank < 2; ++rank) {
    const std::string& text = texts[static_cast<std::size_t>(rank)];
    CHECK(text.find("\"format\":\"chorus-record\"") != std::string::npos);
    CHECK(text.find("\"rank\":" + std::to_string(rank) + ",") != std::string::npos);
    CHECK(text.find("\"reason\":\"error\"") != std::string::npos);
    CHECK(text.find("\"chorus_version\":\"" + std::string(chorus::version) + "\"") != std::string::npos);
    CHECK(text.find("\"name\":\"broadcast\"") != std::string::npos);
    CHECK(text.find("\"state\":\"failed\"") != std::string::npos);
  }
  std::filesystem::remove_all(directory);
}

TEST_CASE("CHORUS_RECORD=0 records nothing") {
  ::setenv("CHORUS_RECORD", "0", 1);
  chorus::run_threads(2, [](chorus::communicator& comm) {
    std::vector<float> data(4);
    chorus::allreduce(comm, data);
    CHECK(comm.recorder().on == nullptr);
  });
  ::unsetenv("CHORUS_RECORD");
}

TEST_CASE("a scheme's exchange is an entry, and the collective it makes is its child") {
  std::mutex mutex;
  std::vector<std::vector<entry>> all(3);
  chorus::run_threads(3, [&](chorus::communicator& comm) {
    std::vector<float> x(10, 1.0f), g(10, static_cast<float>(comm.rank()));
    const std::vector<std::span<float>> model{std::span(x)}, gradient{std::span(g)};
    chorus::averaging::allreduce_sgd scheme(comm, chorus::averaging::parameters(model),
                                            chorus::averaging::parameters(gradient));
    for (int step = 0; step < 2; ++step) scheme.step([] {}, [] {});
    std::lock_guard lock(mutex);
    all[static_cast<std::size_t>(comm.rank())] = entries_of(comm);
  });
  for (const auto& entries : all) {
    int exchanges = 0;
    for (std::size_t i = 0; i < entries.size(); ++i) {
      if (entries[i].call.what != kind::scheme) continue;
      ++exchanges;
      CHECK(entries[i].call.name.view() == "allreduce_sgd reduce_gradients");
      CHECK(entries[i].status == state::completed);
      REQUIRE(i + 1 < entries.size());
      CHECK(entries[i + 1].call.what == kind::collective);
      CHECK(entries[i + 1].call.name.view() == "allreduce");
      CHECK(entries[i + 1].parent == static_cast<std::int64_t>(entries[i].index));
      CHECK(entries[i + 1].ended <= entries[i].ended);
    }
    CHECK(exchanges == 2);
  }
}

TEST_CASE("window operations are recorded on the window's communicator") {
  chorus::run_threads(2, [](chorus::communicator& comm) {
    std::vector<float> x(6, 1.0f);
    chorus::window win(comm, x);
    win.put(x);
    win.flush();
    std::vector<std::string> names;
    for (const entry& e : win.communicator().recorder().on->snapshot())
      if (e.call.what == kind::window) names.emplace_back(e.call.name.view());
    CHECK(names == std::vector<std::string>{"put", "flush"});
    for (const entry& e : win.communicator().recorder().on->snapshot())
      if (e.call.name.view() == "put") CHECK(e.call.count == 6);
    win.free();
  });
}

TEST_CASE("a call posted with its name only is described by the front door it runs") {
  chorus::run_threads(2, [](chorus::communicator& comm) {
    std::vector<double> data(5, 1.0);
    auto pending = chorus::collective::start(
        comm, chorus::record::collective("binding_allreduce"),
        [&data](chorus::communicator& c) { chorus::allreduce(c, std::span(data), chorus::op::max{}); }, false);
    pending.wait();
    const entry last = entries_of(comm).back();
    CHECK(last.call.name.view() == "binding_allreduce");
    CHECK(last.described);
    CHECK(last.call.count == 5);
    CHECK(last.call.type == chorus::dtype::float64);
    CHECK(last.call.op.view() == "max");
    CHECK(last.status == state::completed);
    CHECK(!last.algorithm.empty());
  });
}

TEST_CASE("recording can be paused and resumed") {
  chorus::run_threads(2, [](chorus::communicator& comm) {
    std::vector<float> data(4);
    const std::uint64_t before = comm.recorder().on->recorded();
    comm.journal()->set_recording(false);
    CHECK(comm.recorder().on == nullptr);
    chorus::allreduce(comm, data);
    comm.journal()->set_recording(true);
    chorus::allreduce(comm, data);
    CHECK(comm.recorder().on->recorded() == before + 1);
  });
}

// CHORUS_TRACE: every recorded call is a span on its thread's track, the
// phases its algorithm marks lie inside it, and each rank writes its part.
namespace {

using chorus::record::trace_event;

// Whether every phase on a track lies inside a call of that track, and no
// two spans of a track overlap without one holding the other.
bool nested(std::vector<trace_event> events) {
  std::sort(events.begin(), events.end(), [](const trace_event& a, const trace_event& b) {
    return a.thread != b.thread ? a.thread < b.thread : a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  std::vector<const trace_event*> open;
  std::uint32_t track = ~0u;
  for (const trace_event& event : events) {
    if (event.end < event.begin) return false;
    if (event.thread != track) open.clear();
    track = event.thread;
    while (!open.empty() && open.back()->end <= event.begin) open.pop_back();
    if (!open.empty() && open.back()->end < event.end) return false;  // overlaps without holding it
    if (!event.is_call && open.empty()) return false;                 // a phase outside any call
    open.push_back(&event);
  }
  return true;
}

std::size_t spans_named(const std::vector<trace_event>& events, std::string_view name) {
  return static_cast<std::size_t>(std::count_if(events.begin(), events.end(), [&](const trace_event& event) {
    return (event.is_call ? event.call.call.name.view() : event.phase.view()) == name;
  }));
}

}  // namespace

TEST_CASE("CHORUS_TRACE: calls are spans, their algorithms' phases nest inside, each rank writes its part") {
  const std::filesystem::path directory =
      std::filesystem::temp_directory_path() / ("chorus-test-trace-" + std::to_string(::getpid()));
  std::filesystem::remove_all(directory);
  ::setenv("CHORUS_TRACE", (directory / "timeline.json").c_str(), 1);
  std::mutex mutex;
  std::size_t doubling_rounds = 0;
  chorus::run_threads(3, [&](chorus::communicator& comm) {
    for (const std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{300'001}}) {
      std::vector<float> data(count, 1.0f);
      chorus::allreduce(comm, std::span(data), chorus::algo::shm);
      chorus::allreduce(comm, std::span(data), chorus::algo::ring);
      chorus::allreduce(comm, std::span(data), chorus::algo::rd);
      chorus::allreduce(comm, std::span(data), chorus::op::sum{}, chorus::codec::fp16{});
      for (const float value : data) REQUIRE(value == 81.0f);  // 3^4: every rank's ones, four times
      chorus::broadcast(comm, std::span(data), 1, chorus::algo::shm);
      std::vector<float> all(3 * count, 1.0f), mine(count);
      chorus::allgather(comm, std::span(all), chorus::algo::shm);
      chorus::reduce_scatter(comm, std::span<const float>(all), std::span(mine), chorus::op::sum{}, chorus::algo::shm);
      for (const float value : mine) REQUIRE(value == 3.0f);
    }
    const std::vector<trace_event> events = comm.journal()->trace()->events();
    const std::lock_guard lock(mutex);
    CHECK(nested(events));
    CHECK(spans_named(events, "allreduce") == 12);
    CHECK(spans_named(events, "compressed_allreduce") == 4);
    CHECK(spans_named(events, "shared-memory reduce") >= 3);  // allreduce: 300,001 floats in two steps; reduce_scatter
    CHECK(spans_named(events, "shared-memory copy out") >= 4);  // allreduce, allgather (and broadcast but at its root)
    CHECK(spans_named(events, "broadcast") == 4);
    CHECK(spans_named(events, "ring reduce hop") >= 2);        // n - 1 hops
    doubling_rounds += spans_named(events, "doubling round");  // the rank folded out of 3 has none
    CHECK(spans_named(events, "encode") >= 1);
    CHECK(spans_named(events, "decode") >= 1);
  });
  ::unsetenv("CHORUS_TRACE");
  CHECK(doubling_rounds >= 2);
  for (int rank = 0; rank < 3; ++rank) {
    const std::string text = read_file(directory / ("timeline.rank-" + std::to_string(rank) + ".json"));
    CHECK(text.find("\"format\":\"chorus-trace\"") != std::string::npos);
    CHECK(text.find("\"rank\":" + std::to_string(rank) + ",") != std::string::npos);
    CHECK(text.find("\"name\":\"shared-memory reduce\",\"cat\":\"phase\",\"ph\":\"X\"") != std::string::npos);
    CHECK(text.find("\"algorithm\":\"ring\"") != std::string::npos);
  }
  std::filesystem::remove_all(directory);
}

TEST_CASE("a binding's caller name replaces the names of its outermost calls while it is set") {
  chorus::run_threads(2, [](chorus::communicator& comm) {
    std::vector<float> data(5, 1.0f);
    chorus::record::caller_name() = "allreduce_coalesced";
    chorus::allreduce(comm, std::span(data));
    chorus::record::caller_name() = {};
    chorus::allreduce(comm, std::span(data));
    const std::vector<entry> entries = entries_of(comm);
    REQUIRE(entries.size() >= 2);
    CHECK(entries[entries.size() - 2].call.name.view() == "allreduce_coalesced");
    CHECK(entries[entries.size() - 2].call.count == 5);
    CHECK(entries.back().call.name.view() == "allreduce");
  });
}
