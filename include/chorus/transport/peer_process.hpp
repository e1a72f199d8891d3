// peer_process: who a peer is as an operating-system process, so that a
// transport can tell within a fraction of a second that a peer on the same
// host has died, whatever UCX's own detection does.
//
// Why: UCX 1.13's shared-memory transports report a dead peer late or never
// (a receive from a SIGKILLed peer stayed pending until the timeout in 147 of
// 147 survivors), while asking the kernel costs one read of /proc/<pid>/stat.
// A process is identified by (host, pid, start time): the start time guards
// against a recycled pid, and a zombie (killed, not yet reaped by its
// launcher) counts as dead. The host key is the boot id plus the network and
// pid namespaces, so ranks in different containers or network namespaces are
// different hosts even on one kernel: for them, detection is UCX's (TCP
// connection reset, keepalive).
#pragma once

#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace chorus::transport {

struct process_identity {
  std::string host;  // boot id and namespaces: equal means "same kernel view"
  long pid = 0;
  unsigned long long start = 0;  // clock ticks after boot, field 22 of /proc/<pid>/stat

  // "host pid start", as published through the rendezvous store.
  std::string encode() const { return host + " " + std::to_string(pid) + " " + std::to_string(start); }

  static std::optional<process_identity> decode(std::string_view text) {
    const std::size_t second = text.rfind(' ');
    if (second == std::string_view::npos || second == 0) return std::nullopt;
    const std::size_t first = text.rfind(' ', second - 1);
    if (first == std::string_view::npos) return std::nullopt;
    process_identity identity;
    identity.host = std::string(text.substr(0, first));
    if (!parse(text.substr(first + 1, second - first - 1), identity.pid) ||
        !parse(text.substr(second + 1), identity.start))
      return std::nullopt;
    return identity;
  }

  static process_identity self() {
    process_identity identity;
    identity.host = host_key();
    identity.pid = static_cast<long>(::getpid());
    identity.start = start_ticks(identity.pid).value_or(0);
    return identity;
  }

  // The state letter and start time from /proc/<pid>/stat; nullopt when the
  // process does not exist. The command name (field 2) may hold spaces and
  // parentheses, so fields are counted from the last ')'.
  static std::optional<std::pair<char, unsigned long long>> stat(long pid) {
    char path[48];
    std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    std::FILE* file = std::fopen(path, "r");
    if (file == nullptr) return std::nullopt;
    char line[1024];
    const std::size_t length = std::fread(line, 1, sizeof line - 1, file);
    std::fclose(file);
    const std::string_view text(line, length);
    const std::size_t close = text.rfind(')');
    if (close == std::string_view::npos) return std::nullopt;
    // After ')': field 3 (state) is the first, field 22 (starttime) the 20th.
    std::string_view rest = text.substr(close + 1);
    std::string_view fields[20];
    for (std::string_view& field : fields) {
      const std::size_t begin = rest.find_first_not_of(' ');
      if (begin == std::string_view::npos) return std::nullopt;
      rest.remove_prefix(begin);
      field = rest.substr(0, rest.find(' '));
      rest.remove_prefix(field.size());
    }
    unsigned long long start = 0;
    if (fields[0].empty() || !parse(fields[19], start)) return std::nullopt;
    return std::pair{fields[0][0], start};
  }

  static std::optional<unsigned long long> start_ticks(long pid) {
    const auto found = stat(pid);
    if (!found) return std::nullopt;
    return found->second;
  }

 private:
  template <class Number>
  static bool parse(std::string_view text, Number& value) {
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    return ec == std::errc() && end == text.data() + text.size();
  }

  static std::string host_key() {
    char boot[64] = "?";
    if (std::FILE* file = std::fopen("/proc/sys/kernel/random/boot_id", "r")) {
      if (std::fscanf(file, "%63s", boot) != 1) boot[0] = '?';
      std::fclose(file);
    }
    return std::string(boot) + "/" + link("/proc/self/ns/net") + "/" + link("/proc/self/ns/pid");
  }

  static std::string link(const char* path) {
    char target[128];
    const ssize_t length = ::readlink(path, target, sizeof target);
    return length > 0 ? std::string(target, static_cast<std::size_t>(length)) : std::string("?");
  }
};

// True while the process runs: it exists, is not a zombie, and is the one
// that was published (same start time).
inline bool process_alive(const process_identity& process) {
  const auto found = process_identity::stat(process.pid);
  if (!found) return false;
  const auto [state, start] = *found;
  return state != 'Z' && state != 'X' && state != 'x' && start == process.start;
}

}  // namespace chorus::transport
