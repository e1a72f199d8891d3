// One rank's UCP context and worker: created with the tag feature, RMA
// and 64-bit atomics (tensor windows: remote_memory.hpp), and
// wakeup for the block progress mode, which alone needs it: asking for it
// otherwise would rule out transports without wakeup support), with room
// for chorus's operation state in every request (request.hpp), and the
// memory kinds the context can move.
#pragma once

#include <chorus/core/error.hpp>
#include <chorus/core/memory_kind.hpp>
#include <chorus/transport/transport.hpp>
#include <chorus/transport/ucx/defaults.hpp>
#include <chorus/transport/ucx/remote_memory.hpp>
#include <chorus/transport/ucx/request.hpp>
#include <chorus/transport/ucx_shm_orphans.hpp>

#include <ucp/api/ucp.h>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace chorus::ucx {

class context {
 public:
  context(int rank, int ranks, bool wakeup) : rank_(rank) {
    prepare_environment();
    static const bool swept = (transport::remove_orphaned_ucx_segments(), true);  // see ucx_shm_orphans.hpp
    (void)swept;
    create_context(ranks, wakeup);
    create_worker(wakeup);
  }
  context(const context&) = delete;
  context& operator=(const context&) = delete;
  ~context() { release(); }

  ucp_context_h handle() const noexcept { return context_; }
  ucp_worker_h worker() const noexcept { return worker_; }
  // The worker's event descriptor (block mode), or -1.
  int event_fd() const noexcept { return event_fd_; }
  chorus::memory_kinds memory_kinds() const noexcept { return memory_kinds_; }
  std::span<const std::byte> address() const noexcept {
    return {reinterpret_cast<const std::byte*>(address_), address_length_};
  }

  // A region a failing job cannot free safely (a peer may still write into
  // it): unmapped after the worker is gone, when nothing can reach it.
  void retire(exposed_memory&& region) { retired_.push_back(std::move(region)); }

 private:
  void create_context(int ranks, bool wakeup) {
    ucp_config_t* config = nullptr;
    ucs_status_t status = ucp_config_read(nullptr, nullptr, &config);
    if (status != UCS_OK) fail("ucp_config_read", status);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS |
                        UCP_PARAM_FIELD_MT_WORKERS_SHARED | UCP_PARAM_FIELD_REQUEST_SIZE | UCP_PARAM_FIELD_REQUEST_INIT;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_RMA | UCP_FEATURE_AMO64 | (wakeup ? UCP_FEATURE_WAKEUP : 0);
    params.estimated_num_eps = static_cast<std::size_t>(ranks);
    params.mt_workers_shared = 0;
    params.request_size = sizeof(detail::operation_state);
    params.request_init = &detail::initialise_request;
    status = ucp_init(&params, config, &context_);
    ucp_config_release(config);
    if (status != UCS_OK) fail("ucp_init", status);
    query_memory_kinds();
  }

  void query_memory_kinds() {
    ucp_context_attr_t attributes{};
    attributes.field_mask = UCP_ATTR_FIELD_MEMORY_TYPES;
    memory_kinds_ = {memory_kind::host, memory_kind::cuda_pinned};
    if (ucp_context_query(context_, &attributes) == UCS_OK && (attributes.memory_types & UCS_BIT(UCS_MEMORY_TYPE_CUDA)))
      memory_kinds_.insert(memory_kind::cuda_device);
  }

  void create_worker(bool wakeup) {
    ucp_worker_params_t params{};
    params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    // The transport serialises its calls, so UCX need not lock.
    params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    ucs_status_t status = ucp_worker_create(context_, &params, &worker_);
    if (status != UCS_OK) fail("ucp_worker_create", status);
    status = ucp_worker_get_address(worker_, &address_, &address_length_);
    if (status != UCS_OK) fail("ucp_worker_get_address", status);
    if (wakeup) {
      status = ucp_worker_get_efd(worker_, &event_fd_);
      if (status != UCS_OK) fail("ucp_worker_get_efd", status);
    }
  }

  void release() noexcept {
    if (address_ != nullptr) ucp_worker_release_address(worker_, address_);
    if (worker_ != nullptr) ucp_worker_destroy(worker_);
    retired_.clear();
    if (context_ != nullptr) ucp_cleanup(context_);
    address_ = nullptr;
    worker_ = nullptr;
    context_ = nullptr;
  }

  [[noreturn]] void fail(const char* call, ucs_status_t status) {
    release();
    throw error(errc::transport, std::string(call) + ": " + ucs_status_string(status), {rank_, -1, "ucx setup"});
  }

  int rank_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  ucp_address_t* address_ = nullptr;
  std::size_t address_length_ = 0;
  int event_fd_ = -1;
  chorus::memory_kinds memory_kinds_;
  std::vector<exposed_memory> retired_;
};

}  // namespace chorus::ucx
