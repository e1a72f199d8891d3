// shared_segment: one POSIX shared-memory segment mapped into this process.
//
// The ranks of a host that run collectives through shared memory map one
// segment: the first creates it (/dev/shm/chorus_<creator pid>_<job>_...),
// the others open it by name, and the creator unlinks the name as soon as
// every one has mapped it. From then on the segment lives exactly as long
// as some rank maps it, so no crash afterwards can leak it. A crash inside
// the short window before the unlink leaves a name behind; since the
// creator's pid is in the name, remove_orphaned_segments() (run by every
// creator before it creates, and by chorus-run when a job ends) removes the
// names whose creator has exited: nobody can attach to them any more.
//
// Ranks that are threads or coroutines of one process (a simulation's:
// ranks_in_one_process below) share a segment made in that process instead:
// anonymous memory, found by its name in this process and mapped once for
// all of them, its pages allocated as they are first touched. A simulation
// of 65,536 ranks would otherwise map a file 65,536 times (past Linux's
// default limit of 65,530 mappings) and hold every slot of every host.
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/transport/ucx_shm_orphans.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>

namespace chorus::transport {

inline constexpr std::string_view segment_prefix = "chorus_";

class shared_segment {
 public:
  shared_segment() = default;
  shared_segment(const shared_segment&) = delete;
  shared_segment& operator=(const shared_segment&) = delete;
  shared_segment(shared_segment&& other) noexcept { *this = std::move(other); }
  shared_segment& operator=(shared_segment&& other) noexcept {
    std::swap(name_, other.name_);
    std::swap(base_, other.base_);
    std::swap(bytes_, other.bytes_);
    std::swap(linked_, other.linked_);
    std::swap(in_process_, other.in_process_);
    return *this;
  }
  ~shared_segment() {
    unlink();
    if (base_ != nullptr && !in_process_) ::munmap(base_, bytes_);
  }

  // A name for a segment made by this process: "/chorus_<pid>_<what>".
  static std::string name_for(std::string_view what) {
    return "/" + std::string(segment_prefix) + std::to_string(::getpid()) + "_" + std::string(what);
  }

  // Creates and maps `bytes` of zeroed shared memory; the space is
  // allocated now, so a full /dev/shm is this error, not a SIGBUS later.
  static shared_segment create(const std::string& name, std::size_t bytes) {
    const int fd = ::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0) throw failure("shm_open(create) " + name, errno);
    shared_segment segment;
    segment.name_ = name;
    segment.linked_ = true;
    const int allocated = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes));
    if (allocated != 0) {
      ::close(fd);
      throw failure(
          "allocating " + std::to_string(bytes >> 10) + " KiB for " + name + " (is /dev/shm full or too small?)",
          allocated);
    }
    segment.map(fd, bytes);
    return segment;
  }

  // Maps an existing segment of `bytes`; false while it does not exist yet
  // (or is not yet its full size).
  bool open(const std::string& name, std::size_t bytes) {
    const int fd = ::shm_open(name.c_str(), O_RDWR, 0600);
    if (fd < 0) {
      if (errno == ENOENT) return false;
      throw failure("shm_open " + name, errno);
    }
    struct stat info{};
    if (::fstat(fd, &info) != 0 || static_cast<std::size_t>(info.st_size) < bytes) {
      ::close(fd);
      return false;
    }
    name_ = name;
    map(fd, bytes);
    return true;
  }

  // The same for ranks of this one process only (see the top), and open()'s
  // twin for them.
  static shared_segment create_in_process(const std::string& name, std::size_t bytes) {
    void* const base =
        ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) throw failure("mmap " + name, errno);
    shared_segment segment;
    segment.name_ = name;
    segment.base_ = base;
    segment.bytes_ = bytes;
    segment.linked_ = true;
    segment.in_process_ = std::shared_ptr<void>(base, [bytes](void* mapped) { ::munmap(mapped, bytes); });
    const std::lock_guard lock(in_process_names().mutex);
    in_process_names().segments[name] = {segment.in_process_, bytes};
    return segment;
  }
  bool open_in_process(const std::string& name, std::size_t bytes) {
    const std::lock_guard lock(in_process_names().mutex);
    const auto found = in_process_names().segments.find(name);
    if (found == in_process_names().segments.end() || found->second.bytes < bytes) return false;
    std::shared_ptr<void> mapping = found->second.mapping.lock();
    if (!mapping) return false;
    name_ = name;
    base_ = mapping.get();
    bytes_ = bytes;
    in_process_ = std::move(mapping);
    return true;
  }

  // Removes the name (the creator, once everyone has mapped it).
  void unlink() noexcept {
    if (linked_ && in_process_) {
      const std::lock_guard lock(in_process_names().mutex);
      in_process_names().segments.erase(name_);
    } else if (linked_) {
      ::shm_unlink(name_.c_str());
    }
    linked_ = false;
  }

  std::byte* data() const noexcept { return static_cast<std::byte*>(base_); }
  std::size_t size() const noexcept { return bytes_; }
  const std::string& name() const noexcept { return name_; }

 private:
  static error failure(const std::string& what, int code) {
    return error(errc::transport, what + ": " + std::strerror(code));
  }

  void map(int fd, std::size_t bytes) {
    void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    const int code = errno;
    ::close(fd);
    if (base == MAP_FAILED) throw failure("mmap " + name_, code);
    base_ = base;
    bytes_ = bytes;
  }

  // The names of this process's in-process segments.
  struct in_process_table {
    struct made {
      std::weak_ptr<void> mapping;
      std::size_t bytes = 0;
    };
    std::mutex mutex;
    std::map<std::string, made> segments;
  };
  static in_process_table& in_process_names() {
    static in_process_table table;
    return table;
  }

  std::string name_;
  void* base_ = nullptr;
  std::size_t bytes_ = 0;
  bool linked_ = false;               // this process created the name and has not removed it
  std::shared_ptr<void> in_process_;  // an in-process segment's mapping, shared by its ranks
};

// Whether every rank of a transport T runs in this one process (T says so
// with `static constexpr bool ranks_in_one_process = true`): its hosts'
// segments are then made in process.
template <class T>
constexpr bool ranks_in_one_process = requires { requires T::ranks_in_one_process; };

// Removes /dev/shm/chorus_<pid>_* names of our user whose creator has
// exited; returns how many. Cost: one read of /dev/shm.
inline std::size_t remove_orphaned_segments() {
  std::size_t removed = 0;
  for (const std::string& name : detail::directory_names("/dev/shm")) {  // ucx_shm_orphans.hpp's
    if (!name.starts_with(segment_prefix)) continue;
    const std::string_view rest = std::string_view(name).substr(segment_prefix.size());
    const long pid = std::strtol(std::string(rest.substr(0, rest.find('_'))).c_str(), nullptr, 10);
    if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    const std::string path = "/dev/shm/" + name;
    struct stat info{};
    if (::stat(path.c_str(), &info) != 0 || info.st_uid != ::getuid()) continue;
    if (::unlink(path.c_str()) == 0) ++removed;
  }
  return removed;
}

}  // namespace chorus::transport
