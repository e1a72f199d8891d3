// Runs N ranks as N threads of this process, each with its own UCX context
// and worker, over the real transport: the harness for tests and examples
// that want a multi-rank job without a launcher.
//
//   chorus::run_threads(5, [](chorus::communicator& comm) { ... });
//
// This thread hosts the store. If any rank throws, the others are left to
// fail by timeout (keep it short in tests), and the earliest error is
// rethrown after every thread has finished.
#pragma once

#include <chorus/bootstrap/store_open.hpp>
#include <chorus/bootstrap/token.hpp>
#include <chorus/comm/connect.hpp>

#include <chrono>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace chorus {

template <class Body>
void run_threads(int ranks, Body&& body, const options& given = {}) {
  require(ranks >= 1, "run_threads: ranks must be at least 1");
  const std::string token = bootstrap::random_token();
  store::server_options hosting;
  hosting.token = token;
  const std::unique_ptr<store::host> store_host = store::host_store(std::move(hosting));
  bootstrap::launch_info shared;
  shared.size = ranks;
  shared.local_size = ranks;
  shared.store = bootstrap::address{"127.0.0.1", store_host->port()};
  shared.token = token;
  shared.launcher_hosts_store = true;
  shared.source = "run_threads";

  std::mutex first_error_mutex;
  std::exception_ptr first_error;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(ranks));
  for (int rank = 0; rank < ranks; ++rank) {
    threads.emplace_back([&, rank] {
      try {
        bootstrap::launch_info info = shared;
        info.rank = rank;
        communicator comm = connect(info, given);
        body(comm);
      } catch (...) {
        std::lock_guard lock(first_error_mutex);
        if (!first_error) first_error = std::current_exception();
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  if (first_error) std::rethrow_exception(first_error);
}

}  // namespace chorus
