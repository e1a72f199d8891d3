// Three rounds of window operations run on two windows at once, one over
// host memory and one over device memory, for the tests of window slots in
// device memory (test_cuda_direct, programs/direct_check): a put to every
// target then a weighted update (non-blocking on the device: the
// background thread), weighted accumulates (error feedback carries the
// first round's residual) read by collect with reset, and a publish read by
// a weighted get. After each round the device window's results are compared
// bit for bit with the host window's. Barriers keep a round's entries from
// landing before every rank has read the last one.
#pragma once

#include <chorus/window/window.hpp>

#include <cstring>
#include <map>
#include <span>
#include <utility>
#include <vector>

namespace chorus_test {

// `device`: n floats of device memory; `write(values)` copies them there
// and returns the span; `read(span)` copies a span (device or host memory)
// out. `differs(what)` is called for each result that is not equal. Returns
// whether the device window kept its slots in device memory.
template <class Communicator, class Write, class Read, class Differs>
bool window_rounds(Communicator& comm, std::size_t n, const chorus::codec::any_codec& wire, Write&& write, Read&& read,
                   Differs&& differs) {
  const int me = comm.rank();
  const auto values = [&](int round) {
    std::vector<float> v(n);
    for (std::size_t k = 0; k < n; ++k)
      v[k] = static_cast<float>((me * 17 + round * 5 + static_cast<int>(k) * 3) % 29) * 0.173f - 2.0f;
    return v;
  };
  const auto compare = [&](const char* what, std::span<const float> from_device, const std::vector<float>& from_host) {
    const std::vector<float> got = read(from_device);
    if (got.size() != from_host.size() || (n > 0 && std::memcmp(got.data(), from_host.data(), n * sizeof(float)) != 0))
      differs(what);
  };
  using slot_copies = std::map<int, std::pair<std::vector<float>, double>>;
  const auto copy_slots = [](auto& win) {
    slot_copies slots;
    win.collect([&](int source, std::span<const float> value, double p) {
      slots[source] = {std::vector<float>(value.begin(), value.end()), p};
    });
    return slots;
  };
  const auto compare_slots = [&](const char* what, auto& win, slot_copies& host, bool reset) {
    win.collect(
        [&](int source, std::span<const float> value, double p) {
          compare(what, value, host[source].first);
          if (p != host[source].second) differs(what);
        },
        reset);
  };

  std::vector<float> host = values(0);
  chorus::window on_host(comm, std::span<const float>(host), {.codec = wire});
  chorus::window in_device(comm, std::span<const float>(write(host)), {.codec = wire});
  const bool on_device = in_device.on_device();

  const std::vector<float> first = values(1);
  on_host.put(first);
  in_device.put(write(first));
  on_host.quiesce();
  in_device.quiesce();
  std::vector<chorus::neighbour_weight> from;
  for (int source : on_host.sources()) from.push_back({source, 0.25 + 0.1 * source});
  on_host.update(host, 0.4, from);
  const std::span<float> out = write(values(0));
  in_device.update_nonblocking(out, 0.4, from).wait();
  compare("window update", out, host);
  if (in_device.p() != on_host.p()) differs("window update's p");
  comm.barrier();

  const std::vector<float> delta = values(2);
  std::vector<chorus::neighbour_weight> to;
  for (int target : on_host.targets()) to.push_back({target, 0.5 + 0.125 * target});
  on_host.accumulate(delta, to);
  in_device.accumulate(write(delta), to);
  on_host.quiesce();
  in_device.quiesce();
  slot_copies slots = copy_slots(on_host);
  compare_slots("window accumulate", in_device, slots, true);
  comm.barrier();

  const std::vector<float> published = values(3);
  on_host.publish(published);
  in_device.publish(write(published));
  comm.barrier();
  std::vector<chorus::neighbour_weight> weighted;
  for (int source : on_host.sources()) weighted.push_back({source, 0.7});
  on_host.get(weighted);
  in_device.get(weighted);
  slots = copy_slots(on_host);
  compare_slots("window get", in_device, slots, false);
  on_host.free();
  in_device.free();
  return on_device;
}

}  // namespace chorus_test
