// A journal: what one rank of one job has recorded, a ring per
// communicator (ring.hpp), and the facts that make its dump
// self-describing (job, rank, size, host, pid, chorus version, each
// communicator's members). A world owns one (comm/communicator.hpp);
// every live journal of the process is listed, so a signal dumps them all
// (dump_signal.hpp).
//
//   CHORUS_RECORD=N       entries per communicator (default 2048, rounded up
//                         to a power of two); 0 records nothing
//   CHORUS_RECORD_DIR=D   where dumps go: D/rank-<rank>.json, written on an
//                         error raised to the caller, on SIGUSR1 and at exit;
//                         D/rank-<rank>.progress counts the calls this rank
//                         has finished, for chorus-run --stall-after
//   CHORUS_TRACE=FILE     the recorded calls and their phases as a timeline
//                         (trace.hpp, trace_file.hpp), written at exit: FILE
//                         for a one-rank job, else FILE's stem.rank-<rank>
//                         and extension beside it (chorus-run merges them)
#pragma once

#include <chorus/core/env.hpp>
#include <chorus/core/version.hpp>
#include <chorus/record/clock.hpp>
#include <chorus/record/ring.hpp>
#include <chorus/record/trace.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

namespace chorus::record {

inline constexpr std::size_t default_entries = 2048;

// Where rank `rank`'s part of the timeline CHORUS_TRACE=`file` goes in a
// job of several ranks: `file`'s stem + ".rank-<rank>" + its extension,
// beside it (chorus-run merges the parts into `file`).
inline std::filesystem::path trace_part(const std::filesystem::path& file, int rank) {
  return file.parent_path() / (file.stem().string() + ".rank-" + std::to_string(rank) + file.extension().string());
}

struct journal_settings {
  std::size_t entries = default_entries;  // 0: off
  std::string directory;                  // empty: dumps only on a signal, to a directory of /tmp
  std::string trace;                      // empty: no timeline

  static journal_settings from_environment() {
    journal_settings chosen;
    if (const auto entries = env::get_integer("CHORUS_RECORD", 0, 1 << 24))
      chosen.entries = static_cast<std::size_t>(*entries);
    if (const auto directory = env::get("CHORUS_RECORD_DIR"); directory && !directory->empty())
      chosen.directory = *directory;
    if (const auto trace = env::get("CHORUS_TRACE"); trace && !trace->empty()) chosen.trace = *trace;
    return chosen;
  }
};

class journal {
 public:
  journal(std::uint64_t job, int rank, int size, journal_settings settings)
      : job_(job), rank_(rank), size_(size), settings_(std::move(settings)), start_(clock_anchor::now()) {
    if (enabled() && !settings_.directory.empty()) map_progress();
    if (enabled() && !settings_.trace.empty()) trace_ = std::make_unique<trace_log>();
  }
  ~journal() {
    if (progress_ != nullptr) ::munmap(progress_, sizeof *progress_);
  }
  journal(const journal&) = delete;
  journal& operator=(const journal&) = delete;

  // One more call finished (where a launcher watches for stalls).
  void finished_one() noexcept {
    if (progress_ != nullptr) progress_->fetch_add(1, std::memory_order_relaxed);
  }

  bool enabled() const noexcept { return settings_.entries > 0; }
  // Whether calls are recorded now: a program may record only the steps it
  // wants to see (bench/record_overhead compares the two in one run).
  bool recording() const noexcept { return recording_.load(std::memory_order_relaxed); }
  void set_recording(bool on) noexcept { recording_.store(on, std::memory_order_relaxed); }
  std::uint64_t job() const noexcept { return job_; }
  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  const journal_settings& settings() const noexcept { return settings_; }
  const clock_anchor& start() const noexcept { return start_; }
  // The timeline's events; null unless CHORUS_TRACE is set.
  trace_log* trace() const noexcept { return trace_.get(); }

  // Where this rank's timeline goes: FILE alone for a job of one rank,
  // else its part (trace_part).
  std::filesystem::path trace_path() const {
    if (size_ == 1) return settings_.trace;
    return trace_part(settings_.trace, rank_);
  }

  // The ring of communicator `id`, made on first use; null when recording is off.
  std::shared_ptr<ring> ring_of(std::uint32_t id, const std::vector<int>& members, int rank) {
    if (!enabled()) return nullptr;
    std::lock_guard lock(mutex_);
    std::shared_ptr<ring>& held = rings_[id];
    if (!held) held = std::make_shared<ring>(id, members, rank, settings_.entries);
    return held;
  }
  std::vector<std::shared_ptr<const ring>> rings() const {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<const ring>> all;
    for (const auto& [id, held] : rings_) all.push_back(held);
    return all;
  }

  // The message of the error that ended a recorded call, for the dump.
  void note_failure(std::string_view what) {
    std::lock_guard lock(mutex_);
    failure_ = std::string(what);
  }
  std::string failure() const {
    std::lock_guard lock(mutex_);
    return failure_;
  }

  // Where this rank's dump goes: the configured directory, else (a dump
  // someone asked for with a signal) one per job under the temporary directory.
  std::filesystem::path dump_path() const {
    std::filesystem::path directory = settings_.directory;
    if (directory.empty()) {
      char job[17];
      std::snprintf(job, sizeof job, "%016llx", static_cast<unsigned long long>(job_));
      const char* temporary = std::getenv("TMPDIR");
      directory = std::filesystem::path(temporary != nullptr && *temporary != '\0' ? temporary : "/tmp") /
                  ("chorus-record-" + std::string(job));
    }
    return directory / ("rank-" + std::to_string(rank_) + ".json");
  }

 private:
  // D/rank-<rank>.progress: 8 bytes, the count of finished calls, shared
  // with whoever maps it; none where the file cannot be made.
  void map_progress() {
    std::error_code ignored;
    std::filesystem::create_directories(settings_.directory, ignored);
    const std::string path = settings_.directory + "/rank-" + std::to_string(rank_) + ".progress";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return;
    if (::ftruncate(fd, sizeof(std::uint64_t)) == 0) {
      void* mapped = ::mmap(nullptr, sizeof(std::uint64_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (mapped != MAP_FAILED) progress_ = static_cast<std::atomic<std::uint64_t>*>(mapped);
    }
    ::close(fd);
  }

  std::uint64_t job_;
  int rank_;
  int size_;
  journal_settings settings_;
  clock_anchor start_;
  mutable std::mutex mutex_;
  std::map<std::uint32_t, std::shared_ptr<ring>> rings_;
  std::string failure_;
  std::atomic<std::uint64_t>* progress_ = nullptr;
  std::unique_ptr<trace_log> trace_;
  std::atomic<bool> recording_{true};
};

}  // namespace chorus::record
