// Removes shared-memory segments that UCX left behind in /dev/shm.
//
// UCX's posix transport creates each segment as a named file in /dev/shm and
// unlinks the name a few milliseconds later (peers attach through
// /proc/<pid>/fd). A process killed inside that window leaves the file, and
// nothing ever removes it: the randomized kill test saw a few per thousand
// killed ranks. Such a file is garbage for certain when no live process maps
// it or holds it open: with the name unlinked-on-create scheme nobody can
// attach to it any more, and a process using named segments (proc links
// off) keeps its own mapped. Only files of our own user, older than a few
// seconds (never one being created), are removed.
//
// The transport calls this once per process before creating its UCX
// context; chorus-run calls it when a job ends. Cost when there is nothing
// to remove: one read of /dev/shm.
#pragma once

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::transport {

inline constexpr std::string_view ucx_segment_prefix = "ucx_shm_posix_";

namespace detail {

inline std::vector<std::string> directory_names(const char* path) {
  std::vector<std::string> names;
  if (DIR* directory = ::opendir(path)) {
    while (const dirent* entry = ::readdir(directory)) names.emplace_back(entry->d_name);
    ::closedir(directory);
  }
  return names;
}

// Segment names any live process maps or holds open.
inline std::set<std::string> segments_in_use() {
  std::set<std::string> used;
  const std::string marker = "/dev/shm/" + std::string(ucx_segment_prefix);
  const auto take = [&](std::string_view text) {
    const std::size_t at = text.find(marker);
    if (at == std::string_view::npos) return;
    std::string_view name = text.substr(at + 9);  // after "/dev/shm/"
    name = name.substr(0, name.find_first_of(" \n"));
    used.emplace(name);
  };
  for (const std::string& pid : directory_names("/proc")) {
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    if (std::FILE* maps = std::fopen(("/proc/" + pid + "/maps").c_str(), "r")) {
      char line[4096];
      while (std::fgets(line, sizeof line, maps) != nullptr) take(line);
      std::fclose(maps);
    }
    const std::string fds = "/proc/" + pid + "/fd";
    for (const std::string& fd : directory_names(fds.c_str())) {
      char target[512];
      const ssize_t length = ::readlink((fds + "/" + fd).c_str(), target, sizeof target - 1);
      if (length > 0) take(std::string_view(target, static_cast<std::size_t>(length)));
    }
  }
  return used;
}

}  // namespace detail

// Returns how many orphaned segments were removed.
inline std::size_t remove_orphaned_ucx_segments(std::chrono::seconds min_age = std::chrono::seconds(5)) {
  std::vector<std::string> candidates;
  const std::time_t now = std::time(nullptr);
  for (const std::string& name : detail::directory_names("/dev/shm")) {
    if (!name.starts_with(ucx_segment_prefix)) continue;
    struct stat info{};
    if (::stat(("/dev/shm/" + name).c_str(), &info) != 0 || info.st_uid != ::getuid()) continue;
    if (now - info.st_mtime < min_age.count()) continue;
    candidates.push_back(name);
  }
  if (candidates.empty()) return 0;
  const std::set<std::string> used = detail::segments_in_use();
  std::size_t removed = 0;
  for (const std::string& name : candidates)
    if (!used.contains(name) && ::unlink(("/dev/shm/" + name).c_str()) == 0) ++removed;
  return removed;
}

}  // namespace chorus::transport
