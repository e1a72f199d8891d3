// A fake GPU for the tests: device memory the host cannot touch, streams
// that run on worker threads, events that complete in stream order. It
// implements the same device-operations interface as the CUDA runtime
// (chorus/cuda/device.hpp), so the staging code runs here exactly as it
// would on a GPU.
//
// Device memory is a memfd mapped twice: the pointer handed out is mapped
// PROT_NONE, so any host read or write through it crashes the test (proving
// the staging is complete); the streams copy through a second, read-write
// mapping of the same pages. `write` and `read` let a test put data in and
// take results out through that alias.
#pragma once

#include <chorus/cuda/device.hpp>

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <stdexcept>
#include <thread>
#include <vector>

namespace chorus_test {

class fake_device final : public chorus::cuda::device_operations {
 public:
  fake_device() : default_stream_(std::make_unique<stream>()) {}
  ~fake_device() override {
    default_stream_.reset();
    for (auto& [base, mapped] : device_memory_) unmap(mapped);
    for (const auto& [p, size] : pinned_sizes_) std::free(p);
  }

  std::string name() const override { return "fake device"; }

  // Device memory: the returned pointer faults on any host access.
  void* allocate_device(std::size_t bytes) override {
    const std::size_t length = round_to_pages(std::max<std::size_t>(bytes, 1));
    const int fd = memfd_create("chorus-fake-device", 0);
    if (fd < 0 || ftruncate(fd, static_cast<off_t>(length)) != 0) throw std::runtime_error("fake device: memfd failed");
    void* hidden = mmap(nullptr, length, PROT_NONE, MAP_SHARED, fd, 0);
    void* alias = mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (hidden == MAP_FAILED || alias == MAP_FAILED) throw std::runtime_error("fake device: mmap failed");
    std::lock_guard lock(mutex_);
    device_memory_[static_cast<std::byte*>(hidden)] = {static_cast<std::byte*>(hidden), static_cast<std::byte*>(alias),
                                                       length};
    return hidden;
  }

  void free_device(void* pointer) noexcept override {
    std::lock_guard lock(mutex_);
    const auto found = device_memory_.find(static_cast<std::byte*>(pointer));
    if (found == device_memory_.end()) std::abort();  // not a device allocation
    unmap(found->second);
    device_memory_.erase(found);
  }

  // Test access to device memory, as cudaMemcpy would give it.
  template <class T>
  void write(T* device_pointer, std::span<const T> values) {
    if (values.empty()) return;  // memcpy's pointers must not be null, even for no bytes
    std::memcpy(alias_of(device_pointer), values.data(), values.size_bytes());
  }
  template <class T>
  std::vector<T> read(const T* device_pointer, std::size_t count) {
    std::vector<T> values(count);
    if (count == 0) return values;
    std::memcpy(values.data(), alias_of(device_pointer), count * sizeof(T));
    return values;
  }

  chorus::memory_kind kind_of(const void* pointer) const noexcept override {
    std::lock_guard lock(mutex_);
    if (find_region(pointer) != nullptr) return chorus::memory_kind::cuda_device;
    const auto* p = static_cast<const std::byte*>(pointer);
    for (const auto& [base, size] : pinned_sizes_)
      if (p >= static_cast<const std::byte*>(base) &&
          p < static_cast<const std::byte*>(base) + std::max<std::size_t>(size, 1))
        return chorus::memory_kind::cuda_pinned;
    return chorus::memory_kind::host;
  }

  void* allocate_pinned(std::size_t bytes) override {
    void* p = std::aligned_alloc(256, (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256);
    if (p == nullptr) throw std::bad_alloc();
    std::lock_guard lock(mutex_);
    pinned_sizes_[p] = bytes;
    ++pinned_allocations_;
    return p;
  }
  void free_pinned(void* pointer) noexcept override {
    std::lock_guard lock(mutex_);
    pinned_sizes_.erase(pointer);
    std::free(pointer);
  }

  chorus::cuda::stream_handle create_stream() override {
    std::lock_guard lock(mutex_);
    streams_.push_back(std::make_unique<stream>());
    return streams_.back().get();
  }
  void destroy_stream(chorus::cuda::stream_handle handle) noexcept override {
    std::unique_ptr<stream> dying;
    {
      std::lock_guard lock(mutex_);
      for (auto& s : streams_)
        if (s.get() == handle) dying = std::move(s);
      std::erase(streams_, nullptr);
    }
  }

  // As with cudaEventDestroy, an event may be destroyed while a stream still
  // waits on it: the work that uses it holds it alive.
  chorus::cuda::event_handle create_event() override {
    auto e = std::make_shared<event>();
    std::lock_guard lock(mutex_);
    events_[e.get()] = e;
    return e.get();
  }
  void destroy_event(chorus::cuda::event_handle handle) noexcept override {
    std::lock_guard lock(mutex_);
    events_.erase(handle);
  }

  void copy_async(void* destination, const void* source, std::size_t bytes, chorus::cuda::stream_handle s) override {
    std::byte* to = translate(destination, bytes);
    const std::byte* from = translate(const_cast<void*>(source), bytes);
    stream_of(s).enqueue([=, this] {
      std::memcpy(to, from, bytes);
      copied_bytes_ += bytes;
    });
    ++copies_;
  }

  // Like cudaEventRecord: the event is pending until the stream reaches it.
  void record(chorus::cuda::event_handle handle, chorus::cuda::stream_handle s) override {
    std::shared_ptr<event> e = event_of(handle);
    const std::uint64_t generation = e->recorded.fetch_add(1) + 1;
    stream_of(s).enqueue([e, generation] { e->reached.store(generation); });
  }

  // Like cudaStreamWaitEvent: waits for the record made before this call.
  void stream_wait(chorus::cuda::stream_handle s, chorus::cuda::event_handle handle) override {
    std::shared_ptr<event> e = event_of(handle);
    const std::uint64_t generation = e->recorded.load();
    stream_of(s).enqueue([e, generation] {
      while (e->reached.load() < generation) std::this_thread::yield();
    });
  }

  bool completed(chorus::cuda::event_handle handle) override {
    const std::shared_ptr<event> e = event_of(handle);
    return e->reached.load() >= e->recorded.load();
  }

  // The direct path: the fake stands in for a UCX that moves device memory
  // by handing the network its read-write alias (set_network_reaches(false):
  // a UCX without CUDA support, like Debian's). A transport that says it
  // moves device memory (NCCL) reaches it, as with the CUDA runtime.
  bool network_reaches_device(const chorus::memory_kinds& moved) const noexcept override {
    return network_reaches_ || moved.contains(chorus::memory_kind::cuda_device);
  }
  void* network_address(void* device_pointer) const noexcept override {
    return const_cast<fake_device*>(this)->translate(device_pointer, 0);
  }
  void set_network_reaches(bool reaches) noexcept { network_reaches_ = reaches; }
  // The transport registers the alias as host memory (the truth here); the
  // fake stands in for a UCX that takes it for CUDA memory, unless told
  // otherwise (set_registered_as_device(false): a UCX whose context moves
  // CUDA memory but whose ucp_mem_query calls this buffer host memory).
  bool network_registers_device(chorus::memory_kind registered) const noexcept override {
    ++registration_questions_;
    return registered_as_device_ || registered == chorus::memory_kind::cuda_device;
  }
  void set_registered_as_device(bool registered) noexcept { registered_as_device_ = registered; }
  std::size_t registration_questions() const noexcept { return registration_questions_.load(); }

  // Work for the caller's stream, as a kernel would be (runs on its thread).
  void launch(chorus::cuda::stream_handle s, std::function<void()> work) { stream_of(s).enqueue(std::move(work)); }

  // Waits until everything enqueued on `s` so far has run.
  void synchronize(chorus::cuda::stream_handle s) {
    chorus::cuda::event_handle done = create_event();
    record(done, s);
    while (!completed(done)) std::this_thread::yield();
    destroy_event(done);
  }

  std::size_t copied_bytes() const noexcept { return copied_bytes_.load(); }
  std::size_t copies() const noexcept { return copies_.load(); }  // enqueued, in either direction
  std::size_t pinned_allocations() const {
    std::lock_guard lock(mutex_);
    return pinned_allocations_;
  }

  // The read-write view of device memory, for work that runs "on the device".
  template <class T>
  T* alias_of(T* device_pointer) {
    return reinterpret_cast<T*>(translate(const_cast<std::remove_const_t<T>*>(device_pointer), 0));
  }

 private:
  struct region {
    std::byte* hidden;
    std::byte* alias;
    std::size_t length;
  };

  struct event {
    std::atomic<std::uint64_t> recorded{0}, reached{0};
  };

  bool network_reaches_ = true;
  bool registered_as_device_ = true;
  mutable std::atomic<std::size_t> registration_questions_{0};

  // A stream: a worker thread running its tasks in order.
  class stream {
   public:
    stream() : worker_([this] { run(); }) {}
    ~stream() {
      {
        std::lock_guard lock(mutex_);
        stopping_ = true;
      }
      ready_.notify_one();
      worker_.join();
    }
    void enqueue(std::function<void()> task) {
      {
        std::lock_guard lock(mutex_);
        tasks_.push_back(std::move(task));
      }
      ready_.notify_one();
    }

   private:
    void run() {
      for (;;) {
        std::function<void()> task;
        {
          std::unique_lock lock(mutex_);
          ready_.wait(lock, [&] { return stopping_ || !tasks_.empty(); });
          if (tasks_.empty()) return;  // stopping, and all work done
          task = std::move(tasks_.front());
          tasks_.pop_front();
        }
        task();
      }
    }
    std::mutex mutex_;
    std::condition_variable ready_;
    std::deque<std::function<void()>> tasks_;
    bool stopping_ = false;
    std::thread worker_;
  };

  static std::size_t round_to_pages(std::size_t bytes) {
    const auto page = static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
    return (bytes + page - 1) / page * page;
  }

  static void unmap(const region& r) {
    munmap(r.hidden, r.length);
    munmap(r.alias, r.length);
  }

  const region* find_region(const void* pointer) const {
    const auto* p = static_cast<const std::byte*>(pointer);
    auto after = device_memory_.upper_bound(const_cast<std::byte*>(p));
    if (after == device_memory_.begin()) return nullptr;
    const region& r = std::prev(after)->second;
    return p < r.hidden + r.length ? &r : nullptr;
  }

  // Device pointers become their read-write alias; others stay as they are.
  std::byte* translate(void* pointer, std::size_t bytes) {
    std::lock_guard lock(mutex_);
    const region* r = find_region(pointer);
    auto* p = static_cast<std::byte*>(pointer);
    if (r == nullptr) return p;
    if (p + bytes > r->hidden + r->length) throw std::runtime_error("fake device: copy past the end of an allocation");
    return r->alias + (p - r->hidden);
  }

  std::shared_ptr<event> event_of(chorus::cuda::event_handle handle) {
    std::lock_guard lock(mutex_);
    return events_.at(handle);
  }

  stream& stream_of(chorus::cuda::stream_handle s) {
    return s == nullptr ? *default_stream_ : *static_cast<stream*>(s);
  }

  mutable std::mutex mutex_;
  std::map<std::byte*, region> device_memory_;
  std::map<void*, std::size_t> pinned_sizes_;
  std::map<void*, std::shared_ptr<event>> events_;
  std::size_t pinned_allocations_ = 0;
  std::vector<std::unique_ptr<stream>> streams_;
  std::unique_ptr<stream> default_stream_;
  std::atomic<std::size_t> copied_bytes_{0};
  std::atomic<std::size_t> copies_{0};
};

}  // namespace chorus_test
