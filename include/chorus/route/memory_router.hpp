// How a front door (a collective, a compressed collective, a send or a
// receive) takes buffers the host cannot touch, such as CUDA device memory.
//
// A layer above installs a router (cuda/router.hpp: chorus::cuda::router and
// route_front_doors); without one every buffer is host memory and a front
// door pays one atomic load. With one, a front door asks it where each of its
// buffers lives, and if any is not plain host memory, runs its host
// algorithm inside `through_host`: the router copies the buffers it reads
// into host memory, runs the algorithm there, and copies the buffers it
// writes back. So a device pointer never reaches code that dereferences it,
// and the result has the same bits as the host path.
//
//   if (memory_router* router = routed(data))
//     return through_host(*router, comm, [&](std::span<T> host) { return broadcast(comm, host, root); },
//                         staged(data, comm.rank() == root ? buffer_use::read : buffer_use::write));
//
// Inside `through_host` routing is off on that thread: the host copies are
// pinned memory, which the router would otherwise route again.
#pragma once

#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/function_ref.hpp>
#include <chorus/core/memory_kind.hpp>
#include <chorus/core/rank_local.hpp>
#include <chorus/route/local_arithmetic.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <concepts>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>

namespace chorus {

// What a front door does with a buffer: the router copies in what is read
// and out what is written. `write` promises every element is overwritten.
enum class buffer_use : std::uint8_t { read, write, read_write };

struct routed_buffer {
  const void* data = nullptr;
  std::size_t bytes = 0;
  buffer_use use = buffer_use::read;
};

// An algorithm that touches its buffer part by part lets the router move
// each part as it goes (so copies overlap the network): need(offset, bytes)
// before it first reads or writes a part, done(offset, bytes) once the part
// holds its final value. Offsets and sizes are in bytes of the buffer.
class staging_hooks {
 public:
  virtual void need(std::size_t offset, std::size_t bytes) = 0;
  virtual void done(std::size_t offset, std::size_t bytes) = 0;

 protected:
  ~staging_hooks() = default;
};

// What a transport says of the memory it would be handed on the direct
// path: the kinds it moves (UCX: ucp_context_query) and, asked per buffer,
// the kind it registers that buffer as (UCX: ucp_mem_map, then
// ucp_mem_query, in the UCX transport). A transport that moves
// device memory without registering it with UCX (NCCL) leaves the second
// question unset.
struct network_memory {
  memory_kinds moved;
  std::function<memory_kind(const void* data, std::size_t bytes)> registered_as{};
};

// Whether a buffer takes the direct path, and why (for the debug report).
struct path_report {
  bool direct = false;
  std::string reason;
};

class memory_router {
 public:
  // The front door's way to wait: `wait(done, operation)` returns once
  // done() holds or throws (a communicator's poll_until).
  using waiter = function_ref<void(function_ref<bool()> done, std::string_view operation)>;

  virtual ~memory_router() = default;
  virtual memory_kind kind_of(const void* data) const = 0;
  // Calls `body` with one host pointer per buffer (host memory as it is,
  // anything else through a host copy) and returns once what it wrote is
  // back where it belongs.
  virtual void through_host(std::span<const routed_buffer> buffers, function_ref<void(std::span<void* const>)> body,
                            waiter wait) = 0;
  // The same for one buffer read and written by an algorithm that may
  // report its progress through the thread's staging_hooks (set for the
  // body's duration; take_staging_hooks). By default: as through_host.
  virtual void through_host_in_parts(const routed_buffer& buffer, function_ref<void(void*)> body, waiter wait) {
    through_host(std::span<const routed_buffer>(&buffer, 1), [&](std::span<void* const> host) { body(host[0]); }, wait);
  }
  // Copies `bytes` between any two kinds of memory; returns once they have
  // landed (packing device tensors into a host bucket, fusion.hpp).
  virtual void copy(void* to, const void* from, std::size_t bytes, waiter wait) = 0;

  // The direct path, for one buffer of `type` reduced by `op` (empty: a
  // collective that only moves bytes) over a transport that says `network`
  // of it: whether this router takes it (by default never: everything is
  // staged), and then the call itself, which runs body(arithmetic) with the
  // buffers where they are.
  virtual path_report direct_path(const routed_buffer& buffer, dtype type, std::string_view op,
                                  const network_memory& network) const {
    (void)buffer, (void)type, (void)op, (void)network;
    return {false, "staged: this router has no direct path"};
  }
  // The same for a compressed collective over float with `codec`.
  virtual path_report direct_path(const routed_buffer& buffer, const codec_spec& codec,
                                  const network_memory& network) const {
    (void)buffer, (void)codec, (void)network;
    return {false, "staged: this router has no direct path"};
  }
  virtual void through_direct(const routed_buffer& buffer, function_ref<void(local_arithmetic&)> body, waiter wait) {
    (void)buffer, (void)body, (void)wait;
    throw error(errc::invalid_argument, "through_direct: this router has no direct path (ask direct_path first)");
  }
};

namespace detail {
inline std::atomic<memory_router*>& installed_router() noexcept {
  static std::atomic<memory_router*> router{nullptr};
  return router;
}
// The device stream this thread's calls are ordered on (a cudaStream_t,
// set by cuda::stream_scope; null: the default stream), kept here so that a
// non-blocking collective carries its caller's stream to the worker thread.
inline void*& thread_stream() noexcept {
  struct tag;
  return rank_local<void*, tag>();
}
inline staging_hooks*& thread_staging_hooks() noexcept {
  struct tag;
  return rank_local<staging_hooks*, tag>();
}
inline bool& routing_suspended() noexcept {
  struct tag;
  return rank_local<bool, tag>();
}
// Inside through_host: the memory the staged buffers were (call_memory).
inline memory_kind& staged_memory() noexcept {
  struct tag;
  return rank_local<memory_kind, tag>();
}

// Sets one of the thread-local values above until the scope ends.
template <class T>
class scoped_value {
 public:
  scoped_value(T& slot, T value) noexcept : slot_(slot), previous_(std::exchange(slot, value)) {}
  ~scoped_value() { slot_ = previous_; }
  scoped_value(const scoped_value&) = delete;
  scoped_value& operator=(const scoped_value&) = delete;

 private:
  T& slot_;
  T previous_;
};

// A front door's wait for its device work, through its communicator
// (poll_until: bounded by the communicator's timeout, never asleep on the
// network while a copy or kernel finishes).
template <class Communicator>
auto waiting_on(Communicator& comm) noexcept {
  return [&comm](function_ref<bool()> done, std::string_view operation) { comm.poll_until(done, operation); };
}
}  // namespace detail

// Orders this thread's calls on a device stream until the scope ends
// (chorus::cuda::stream_scope).
class thread_stream_scope : detail::scoped_value<void*> {
 public:
  explicit thread_stream_scope(void* stream) noexcept : scoped_value(detail::thread_stream(), stream) {}
};

// `work`, to run on another thread (a background worker's), ordered on the
// device stream of the thread that wraps it.
template <class Work>
auto on_callers_stream(Work work) {
  return [work = std::move(work), stream = detail::thread_stream()]() mutable {
    const thread_stream_scope ordered(stream);
    work();
  };
}

// Installs `router` for every front door (nullptr: none); returns the one
// it replaces.
inline memory_router* install_memory_router(memory_router* router) noexcept {
  return detail::installed_router().exchange(router, std::memory_order_acq_rel);
}

// The hooks a router set for the algorithm about to run on this thread,
// if any; taken once (cleared), so nested calls on other buffers never see
// them.
inline staging_hooks* take_staging_hooks() noexcept { return std::exchange(detail::thread_staging_hooks(), nullptr); }

// Sets the thread's staging hooks for a scope (a router, around its body).
class staging_hooks_scope : detail::scoped_value<staging_hooks*> {
 public:
  explicit staging_hooks_scope(staging_hooks* hooks) noexcept : scoped_value(detail::thread_staging_hooks(), hooks) {}
};

// A buffer and what the front door does with it.
template <class T>
struct staged_buffer {
  std::span<T> span;
  buffer_use use;
};

template <class T>
staged_buffer<T> staged(std::span<T> span, buffer_use use) noexcept {
  return {span, use};
}

// The router to use if any of `spans` is not host memory; nullptr (the
// host path) otherwise, always without a router, and inside through_host.
template <class... T>
memory_router* routed(std::span<T>... spans) noexcept {
  memory_router* router = detail::installed_router().load(std::memory_order_acquire);
  if (router == nullptr || detail::routing_suspended()) return nullptr;
  const bool elsewhere = ((!spans.empty() && router->kind_of(spans.data()) != memory_kind::host) || ...);
  return elsewhere ? router : nullptr;
}

// The memory a collective call was given, as far as its path goes: device
// memory if any of `spans` is device memory with elements in it, else host
// (pinned memory is host memory to every path; an empty buffer moves
// nothing); inside through_host, the memory of the buffers it staged, not
// their host copies. CHORUS_CHECK compares it across ranks.
template <class... T>
memory_kind call_memory(std::span<T>... spans) noexcept {
  if (detail::routing_suspended()) return detail::staged_memory();
  memory_router* router = detail::installed_router().load(std::memory_order_acquire);
  if (router == nullptr) return memory_kind::host;
  const bool device = ((!spans.empty() && router->kind_of(spans.data()) == memory_kind::cuda_device) || ...);
  return device ? memory_kind::cuda_device : memory_kind::host;
}

// Runs body(host spans...) through `router` and returns what it returns;
// `comm` waits (its poll_until: bounded by its timeout).
template <class Communicator, class Body, class... T>
auto through_host(memory_router& router, Communicator& comm, Body&& body, staged_buffer<T>... buffers) {
  using result = std::invoke_result_t<Body&, std::span<T>...>;
  const std::array<routed_buffer, sizeof...(T)> views{
      routed_buffer{static_cast<const void*>(buffers.span.data()), buffers.span.size_bytes(), buffers.use}...};
  std::conditional_t<std::is_void_v<result>, std::optional<int>, std::optional<result>> out;
  const memory_kind given = call_memory(buffers.span...);
  const auto on_host = [&](std::span<void* const> host) {
    const detail::scoped_value<memory_kind> staged_from(detail::staged_memory(), given);
    const detail::scoped_value<bool> suspended(detail::routing_suspended(), true);
    std::size_t next = 0;
    const auto typed = [&](const auto& buffer) {
      using element = typename std::remove_cvref_t<decltype(buffer.span)>::element_type;
      return std::span<element>(static_cast<element*>(host[next++]), buffer.span.size());
    };
    auto arguments = std::tuple<std::span<T>...>{typed(buffers)...};  // braced: left to right
    if constexpr (std::is_void_v<result>) {
      std::apply(body, arguments);
      out.emplace(0);
    } else {
      out.emplace(std::apply(body, arguments));
    }
  };
  router.through_host(views, on_host, detail::waiting_on(comm));
  if constexpr (!std::is_void_v<result>) return *std::move(out);
}

// Runs body(host span) through `router` for one buffer the body reads and
// writes part by part (an allreduce's ring), and returns what it returns.
template <class Communicator, class Body, class T>
auto through_host_in_parts(memory_router& router, Communicator& comm, Body&& body, std::span<T> data) {
  using result = std::invoke_result_t<Body&, std::span<T>>;
  std::optional<result> out;
  const routed_buffer view{static_cast<const void*>(data.data()), data.size_bytes(), buffer_use::read_write};
  const memory_kind given = call_memory(data);
  router.through_host_in_parts(
      view,
      [&](void* host) {
        const detail::scoped_value<memory_kind> staged_from(detail::staged_memory(), given);
        const detail::scoped_value<bool> suspended(detail::routing_suspended(), true);
        out.emplace(body(std::span<T>(static_cast<T*>(host), data.size())));
      },
      detail::waiting_on(comm));
  return *std::move(out);
}

// Copies `count` elements from `from` to `to`, either of which may be
// memory the host cannot touch.
template <class Communicator, class T>
void copy_elements(Communicator& comm, const T* from, std::size_t count, T* to) {
  memory_router* router = routed(std::span<const T>(from, count), std::span<T>(to, count));
  if (router == nullptr) {
    std::copy_n(from, count, to);
    return;
  }
  router->copy(to, from, count * sizeof(T), detail::waiting_on(comm));
}

}  // namespace chorus
