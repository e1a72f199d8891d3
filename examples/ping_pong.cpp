// Point-to-point latency and bandwidth between ranks 0 and 1.
//
//   chorus-run -n 2 ping_pong [--min 8] [--max 64M] [--factor 2]
//
// For each size: latency is half the round trip of a ping-pong; "stream" is
// the bandwidth of a window of back-to-back sends (what ucx_perftest -t
// tag_bw measures); "pingpong" is size / one-way latency. Every size is first
// sent once with a pattern and checked on arrival (#wrong counts bad bytes).
// Bandwidths are GB/s (10^9 bytes per second). Other ranks only wait.
#include <chorus/chorus.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct sweep {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = 64u << 20;
  std::size_t factor = 2;
};

std::size_t parse_size(std::string_view text) {
  const auto value = chorus::env::parse_size(text);
  chorus::require(value && *value > 0, "bad size '" + std::string(text) + "' (examples: 8, 64K, 256M)");
  return *value;
}

sweep parse_arguments(int argc, char** argv) {
  sweep settings;
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") {
      std::printf(
          "usage: ping_pong [--min BYTES] [--max BYTES] [--factor F]   (2 ranks: chorus-run -n 2 ping_pong)\n"
          "One-way latency, ping-pong and streaming bandwidth over UCX, and #wrong bytes.\n");
      std::exit(0);
    }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const std::string_view value = argv[i + 1];
    if (flag == "--min")
      settings.min_bytes = parse_size(value);
    else if (flag == "--max")
      settings.max_bytes = parse_size(value);
    else if (flag == "--factor")
      settings.factor = parse_size(value);
    else
      throw chorus::error(chorus::errc::invalid_argument, "unknown flag " + std::string(flag));
  }
  if (argc % 2 == 0) throw chorus::error(chorus::errc::invalid_argument, "flag without a value");
  chorus::require(settings.factor >= 2, "--factor must be at least 2");
  chorus::require(settings.min_bytes >= 1 && settings.min_bytes <= settings.max_bytes, "need 1 <= --min <= --max");
  return settings;
}

std::byte pattern(std::size_t index, std::size_t size) { return static_cast<std::byte>((index * 131 + size) & 0xff); }

// Sends a patterned message 0 -> 1 and counts wrong bytes on arrival.
std::size_t check_transfer(chorus::communicator& comm, std::span<std::byte> buffer, std::size_t size) {
  std::span<std::byte> message(buffer.data(), size);
  if (comm.rank() == 0) {
    for (std::size_t i = 0; i < size; ++i) message[i] = pattern(i, size);
    comm.send(message, 1);
    std::size_t wrong = 0;
    comm.recv(std::span(&wrong, 1), 1);
    return wrong;
  }
  std::fill(message.begin(), message.end(), std::byte{0});
  comm.recv(message, 0);
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < size; ++i) wrong += message[i] != pattern(i, size);
  comm.send(std::span<const std::size_t>(&wrong, 1), 0);
  return wrong;
}

double latency_seconds(chorus::communicator& comm, std::span<std::byte> message, int iterations) {
  const int peer = 1 - comm.rank();
  const auto start = clock_type::now();
  for (int i = 0; i < iterations; ++i) {
    if (comm.rank() == 0) {
      comm.send(message, peer);
      comm.recv(message, peer);
    } else {
      comm.recv(message, peer);
      comm.send(message, peer);
    }
  }
  const std::chrono::duration<double> elapsed = clock_type::now() - start;
  return elapsed.count() / (2.0 * iterations);
}

// A sliding window of `window` transfers in flight, as ucx_perftest's tag_bw
// keeps: each completion is replaced at once by the next transfer. The final
// acknowledgement makes the sender's clock include the last arrival.
double stream_seconds(chorus::communicator& comm, std::span<std::byte> message, int messages, int window) {
  std::vector<chorus::communicator::request> requests(static_cast<std::size_t>(window));
  const auto post = [&](chorus::communicator::request& slot) {
    slot = comm.rank() == 0 ? comm.isend(std::span<const std::byte>(message), 1, 1) : comm.irecv(message, 0, 1);
  };
  std::byte ack{};
  const auto start = clock_type::now();
  for (int i = 0; i < messages; ++i) {
    auto& slot = requests[static_cast<std::size_t>(i % window)];
    if (i >= window) comm.wait(slot, "stream");
    post(slot);
  }
  comm.wait_all(requests, "stream");
  if (comm.rank() == 0)
    comm.recv(std::span(&ack, 1), 1, 2);
  else
    comm.send(std::span<const std::byte>(&ack, 1), 0, 2);
  const std::chrono::duration<double> elapsed = clock_type::now() - start;
  return elapsed.count();
}

void run(chorus::communicator& comm, const sweep& settings) {
  if (comm.rank() == 0)
    std::printf(
        "# chorus ping-pong: rank 0 <-> rank 1 of %d, progress %s\n"
        "%12s %8s %12s %14s %14s %7s\n",
        comm.size(), std::string(chorus::transport::to_string(comm.config().progress)).c_str(), "size(B)", "iters",
        "latency(us)", "pingpong(GB/s)", "stream(GB/s)", "#wrong");
  // 2 MiB alignment lets the kernel back the buffer with whole huge pages;
  // an unaligned 64 MiB vector measured anywhere from 2 to 9 GB/s here.
  constexpr std::size_t huge_page = 2u << 20;
  const std::size_t capacity = (settings.max_bytes + huge_page - 1) / huge_page * huge_page;
  const std::unique_ptr<std::byte, decltype(&std::free)> storage(
      static_cast<std::byte*>(std::aligned_alloc(huge_page, capacity)), &std::free);
  chorus::require(storage != nullptr, "cannot allocate the message buffer");
  const std::span<std::byte> buffer(storage.get(), capacity);
  for (std::size_t size = settings.min_bytes; size <= settings.max_bytes; size *= settings.factor) {
    const std::size_t wrong = check_transfer(comm, buffer, size);
    std::span<std::byte> message(buffer.data(), size);
    const int iterations = static_cast<int>(std::clamp<std::size_t>((256u << 20) / size, 5, 20000));
    const int window = 64;
    const int messages = static_cast<int>(std::clamp<std::size_t>((1024u << 20) / size, 48, 40000));
    latency_seconds(comm, message, std::max(1, iterations / 10));  // warm-up
    const double latency = latency_seconds(comm, message, iterations);
    stream_seconds(comm, message, window, window);  // warm-up
    const double stream = stream_seconds(comm, message, messages, window);
    if (comm.rank() == 0) {
      const double bytes = static_cast<double>(size);
      std::printf("%12zu %8d %12.2f %14.3f %14.3f %7zu\n", size, iterations, latency * 1e6, bytes / latency / 1e9,
                  bytes * messages / stream / 1e9, wrong);
      std::fflush(stdout);
    }
    if (size > settings.max_bytes / settings.factor) break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const sweep settings = parse_arguments(argc, argv);
    chorus::communicator comm = chorus::init();
    if (comm.size() < 2) {
      std::fprintf(stderr, "ping_pong needs at least 2 ranks (chorus-run -n 2 ping_pong)\n");
      return 2;
    }
    if (comm.rank() < 2) run(comm, settings);
    comm.barrier();
    return 0;
  } catch (const chorus::error& failure) {
    std::fprintf(stderr, "ping_pong: %s\n", failure.what());
    return 1;
  }
}
