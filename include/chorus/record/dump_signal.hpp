// SIGUSR1 asks every rank for its flight record: the handler only writes a
// byte to a pipe (all a handler may safely do); a thread that sleeps on the
// pipe dumps every live journal of the process (dump.hpp). chorus-run
// sends it to every rank when a job stalls. The handler is installed once
// per process, with the first journal that records, and only where
// SIGUSR1 still has its default action (a program's own handler stays).
//
// Where CHORUS_RECORD_DIR is set, SIGTERM (how torchrun, srun and mpirun
// end the rest of a job when one rank fails) dumps too, and where
// CHORUS_TRACE is set it writes the timeline so far; then it ends the
// process as SIGTERM would have, again only where SIGTERM had its default
// action. open_journal also installs the dump on an error nobody catches
// (dump_uncaught.hpp).
#pragma once

#include <chorus/record/dump.hpp>
#include <chorus/record/dump_uncaught.hpp>
#include <chorus/record/live_journals.hpp>
#include <chorus/record/trace_file.hpp>

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace chorus::record {

namespace detail {

inline int signal_pipe[2] = {-1, -1};

inline void on_dump_signal(int number) {
  const int saved = errno;
  const char byte = static_cast<char>(number);
  [[maybe_unused]] const auto written = ::write(signal_pipe[1], &byte, 1);
  errno = saved;
}

inline void dump_on_request() {
  char bytes[64];
  while (true) {
    const auto got = ::read(signal_pipe[0], bytes, sizeof bytes);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return;
    const bool terminating = std::memchr(bytes, SIGTERM, static_cast<std::size_t>(got)) != nullptr;
    for (const auto& live : journals().alive()) {
      if (terminating) write_trace(*live);  // CHORUS_TRACE: what it holds so far
      if (terminating && live->settings().directory.empty()) continue;
      const auto written = dump(*live, terminating ? "terminated" : "signal");
      if (!written.empty())
        std::fprintf(stderr, "chorus: rank %d wrote its flight record to %s\n", live->rank(), written.c_str());
    }
    if (terminating) {  // as if the handler had never been there
      ::signal(SIGTERM, SIG_DFL);
      ::raise(SIGTERM);
    }
  }
}

// `number` runs on_dump_signal, unless a program has its own handler for it.
inline void take_signal(int number) {
  struct sigaction current{};
  if (::sigaction(number, nullptr, &current) != 0 || current.sa_handler != SIG_DFL) return;
  struct sigaction handler{};
  handler.sa_handler = on_dump_signal;
  ::sigemptyset(&handler.sa_mask);
  handler.sa_flags = SA_RESTART;
  ::sigaction(number, &handler, nullptr);
}

inline void install_dump_signal(bool on_terminate) {
  if (::pipe2(signal_pipe, O_CLOEXEC) != 0) return;
  ::fcntl(signal_pipe[1], F_SETFL, O_NONBLOCK);
  std::thread(dump_on_request).detach();
  take_signal(SIGUSR1);
  if (on_terminate) take_signal(SIGTERM);
}

}  // namespace detail

// A journal for rank `rank` of job `job`, listed for SIGUSR1's dumps.
inline std::shared_ptr<journal> open_journal(std::uint64_t job, int rank, int size,
                                             journal_settings settings = journal_settings::from_environment()) {
  auto opened = std::make_shared<journal>(job, rank, size, std::move(settings));
  if (!opened->enabled()) return opened;
  static std::once_flag installed;
  std::call_once(installed, [&] {
    detail::install_dump_signal(!opened->settings().directory.empty() || !opened->settings().trace.empty());
    detail::install_dump_uncaught();
  });
  std::lock_guard lock(detail::journals().mutex);
  detail::journals().all.push_back(opened);
  return opened;
}

}  // namespace chorus::record
