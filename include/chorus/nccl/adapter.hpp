// The NCCL calls chorus makes, as a small interface with two
// implementations: the NCCL library (nccl/library.hpp) and chorus's own
// communicator on the host (nccl/host_adapter.hpp). Everything above it, the
// unique-id bootstrap, the bounded wait with abort, the error mapping, the
// grouped send/recv plans of alltoall, gather and scatter, and the schemes,
// is the same code over both, so it runs and is tested without a GPU.
//
// The interface mirrors NCCL's non-blocking mode: a call enqueues work on a
// stream and returns; check() is ncclCommGetAsyncError (in progress, fine or
// failed) and stream_idle() is cudaStreamQuery. Nothing here waits: the
// waiting, bounded by the communicator's timeout, is in nccl/communicator.hpp.
#pragma once

#include <chorus/comm/ucx_communicator.hpp>
#include <chorus/core/element_type.hpp>
#include <chorus/core/error.hpp>

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace chorus::nccl {

using unique_id = std::array<std::byte, 128>;  // the size of ncclUniqueId
using stream_handle = void*;                   // a cudaStream_t; null: the legacy default stream

enum class reduction { sum, prod, max, min, avg };

// ncclResult_t, value for value (nccl/library.hpp checks it at compile time).
enum class result {
  success = 0,
  unhandled_cuda_error = 1,
  system_error = 2,
  internal_error = 3,
  invalid_argument = 4,
  invalid_usage = 5,
  remote_error = 6,
  in_progress = 7,
};

constexpr std::string_view to_string(result outcome) noexcept {
  switch (outcome) {
    case result::success: return "ncclSuccess";
    case result::unhandled_cuda_error: return "ncclUnhandledCudaError";
    case result::system_error: return "ncclSystemError";
    case result::internal_error: return "ncclInternalError";
    case result::invalid_argument: return "ncclInvalidArgument";
    case result::invalid_usage: return "ncclInvalidUsage";
    case result::remote_error: return "ncclRemoteError";
    case result::in_progress: return "ncclInProgress";
  }
  return "ncclResult(unknown)";
}

// What an NCCL error means to a chorus user. A system error on a running
// communicator is a broken connection (a peer died or its host went away),
// so it is a peer failure like NCCL's remote error; CUDA errors are the
// device's (no device, no driver: unavailable).
constexpr errc category_of(result outcome) noexcept {
  switch (outcome) {
    case result::remote_error:
    case result::system_error: return errc::peer_failure;
    case result::invalid_argument:
    case result::invalid_usage: return errc::invalid_argument;
    case result::unhandled_cuda_error: return errc::unavailable;
    default: return errc::transport;
  }
}

// The communicator's state, as ncclCommGetAsyncError reports it.
struct health {
  result state = result::success;   // success, in_progress, or the error
  std::string detail;               // ncclGetLastError's text, or the host adapter's error
  errc category = errc::transport;  // what a failure means: category_of(state) for NCCL

  bool in_progress() const noexcept { return state == result::in_progress; }
  bool failed() const noexcept { return state != result::success && state != result::in_progress; }
};

// One NCCL communicator (ncclComm_t). Counts are elements; all_gather's and
// reduce_scatter's are per rank. Calls between group_start() and group_end()
// are one ncclGroup: NCCL starts them together, so grouped sends and
// receives cannot deadlock on each other.
class endpoint {
 public:
  virtual ~endpoint() = default;
  virtual void all_reduce(const void* send, void* recv, std::size_t count, dtype type, reduction op,
                          stream_handle stream) = 0;
  virtual void broadcast(const void* send, void* recv, std::size_t count, dtype type, int root,
                         stream_handle stream) = 0;
  virtual void reduce(const void* send, void* recv, std::size_t count, dtype type, reduction op, int root,
                      stream_handle stream) = 0;
  virtual void all_gather(const void* send, void* recv, std::size_t count, dtype type, stream_handle stream) = 0;
  virtual void reduce_scatter(const void* send, void* recv, std::size_t count, dtype type, reduction op,
                              stream_handle stream) = 0;
  virtual void send(const void* data, std::size_t count, dtype type, int peer, stream_handle stream) = 0;
  virtual void recv(void* data, std::size_t count, dtype type, int peer, stream_handle stream) = 0;
  virtual void group_start() = 0;
  virtual void group_end() = 0;

  virtual health check() = 0;                          // ncclCommGetAsyncError
  virtual bool stream_idle(stream_handle stream) = 0;  // cudaStreamQuery: all work enqueued so far is done
  virtual void finalize() = 0;                         // ncclCommFinalize: check() is in progress until flushed
  virtual void abort() noexcept = 0;                   // ncclCommAbort: stops what is stuck, frees everything
};

class adapter {
 public:
  virtual ~adapter() = default;
  virtual std::string name() const = 0;
  virtual int devices() = 0;       // how many GPUs this process sees
  virtual unique_id new_id() = 0;  // ncclGetUniqueId, on the group's rank 0
  // ncclCommInitRankConfig for `group`'s rank on `device`, non-blocking:
  // check() is in progress until every rank of the group has joined. Every
  // rank of `group` calls it with the id rank 0 made.
  virtual std::unique_ptr<endpoint> connect(chorus::communicator& group, const unique_id& id, int device) = 0;
  // Whether `pointer` is memory this adapter moves (NCCL: device memory);
  // the rest goes through the host communicator.
  virtual bool moves(const void* pointer) const noexcept = 0;
};

}  // namespace chorus::nccl
