// The NCCL library behind the adapter interface (nccl/adapter.hpp), and
// chorus::nccl::connect(), which makes an NCCL communicator from a chorus
// one on this rank's GPU:
//
//   chorus::nccl::communicator gpus = chorus::nccl::connect(comm);
//   chorus::nccl::communicator gpus = chorus::nccl::connect(comm, {.device = 1});
//
// Needs NCCL and the CUDA runtime (target chorus::nccl); g++ compiles it.
// Every communicator is made in NCCL's non-blocking mode (config.blocking =
// 0), so that no NCCL call blocks the host: the waits are chorus's,
// bounded by the timeout, with ncclCommAbort behind them.
//
// With no GPU or no driver, connect() throws chorus::error (unavailable)
// naming CUDA's error and what NCCL answered, never crashes.
#pragma once

#include <chorus/cuda/runtime.hpp>
#include <chorus/nccl/nccl_compressed_allreduce.hpp>

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstring>
#include <memory>
#include <optional>
#include <string>

namespace chorus::nccl {

namespace detail {

static_assert(static_cast<int>(result::unhandled_cuda_error) == ncclUnhandledCudaError &&
              static_cast<int>(result::system_error) == ncclSystemError &&
              static_cast<int>(result::internal_error) == ncclInternalError &&
              static_cast<int>(result::invalid_argument) == ncclInvalidArgument &&
              static_cast<int>(result::invalid_usage) == ncclInvalidUsage &&
              static_cast<int>(result::remote_error) == ncclRemoteError &&
              static_cast<int>(result::in_progress) == ncclInProgress);

inline ncclDataType_t nccl_type(dtype type) {
  switch (type) {
    case dtype::int8: return ncclInt8;
    case dtype::uint8: return ncclUint8;
    case dtype::int32: return ncclInt32;
    case dtype::uint32: return ncclUint32;
    case dtype::int64: return ncclInt64;
    case dtype::uint64: return ncclUint64;
    case dtype::float16: return ncclFloat16;
    case dtype::bfloat16: return ncclBfloat16;
    case dtype::float32: return ncclFloat32;
    case dtype::float64: return ncclFloat64;
    default: throw error(errc::invalid_argument, "NCCL has no " + std::string(to_string(type)) + " type");
  }
}

inline ncclRedOp_t nccl_op(reduction op) noexcept {
  switch (op) {
    case reduction::sum: return ncclSum;
    case reduction::prod: return ncclProd;
    case reduction::max: return ncclMax;
    case reduction::min: return ncclMin;
    case reduction::avg: return ncclAvg;
  }
  return ncclSum;
}

inline std::string nccl_version() {
  int code = 0;
  if (ncclGetVersion(&code) != ncclSuccess) return "NCCL (version unknown)";
  return "NCCL " + std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) + "." +
         std::to_string(code % 100);
}

inline std::string describe(ncclResult_t status, ncclComm_t comm) {
  std::string text = std::string(to_string(static_cast<result>(status))) + ": " + ncclGetErrorString(status);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') text += " (" + std::string(last) + ")";
  return text;
}

// Throws for anything but success or in-progress (the non-blocking mode's
// "enqueued, not finished").
inline void require_ok(ncclResult_t status, const char* call, ncclComm_t comm = nullptr) {
  if (status == ncclSuccess || status == ncclInProgress) return;
  throw error(category_of(static_cast<result>(status)), std::string(call) + " failed: " + describe(status, comm));
}

class library_endpoint final : public endpoint {
 public:
  library_endpoint(ncclComm_t comm, int device) : comm_(comm), device_(device) {}
  ~library_endpoint() override {
    if (comm_ != nullptr) (void)ncclCommDestroy(comm_);  // after finalize(); abort() leaves nothing
  }

  void all_reduce(const void* send, void* recv, std::size_t count, dtype type, reduction op,
                  stream_handle stream) override {
    require_ok(ncclAllReduce(send, recv, count, nccl_type(type), nccl_op(op), comm_, on(stream)), "ncclAllReduce",
               comm_);
  }
  void broadcast(const void* send, void* recv, std::size_t count, dtype type, int root, stream_handle stream) override {
    require_ok(ncclBroadcast(send, recv, count, nccl_type(type), root, comm_, on(stream)), "ncclBroadcast", comm_);
  }
  void reduce(const void* send, void* recv, std::size_t count, dtype type, reduction op, int root,
              stream_handle stream) override {
    require_ok(ncclReduce(send, recv, count, nccl_type(type), nccl_op(op), root, comm_, on(stream)), "ncclReduce",
               comm_);
  }
  void all_gather(const void* send, void* recv, std::size_t count, dtype type, stream_handle stream) override {
    require_ok(ncclAllGather(send, recv, count, nccl_type(type), comm_, on(stream)), "ncclAllGather", comm_);
  }
  void reduce_scatter(const void* send, void* recv, std::size_t count, dtype type, reduction op,
                      stream_handle stream) override {
    require_ok(ncclReduceScatter(send, recv, count, nccl_type(type), nccl_op(op), comm_, on(stream)),
               "ncclReduceScatter", comm_);
  }
  void send(const void* data, std::size_t count, dtype type, int peer, stream_handle stream) override {
    require_ok(ncclSend(data, count, nccl_type(type), peer, comm_, on(stream)), "ncclSend", comm_);
  }
  void recv(void* data, std::size_t count, dtype type, int peer, stream_handle stream) override {
    require_ok(ncclRecv(data, count, nccl_type(type), peer, comm_, on(stream)), "ncclRecv", comm_);
  }
  void group_start() override { require_ok(ncclGroupStart(), "ncclGroupStart", comm_); }
  void group_end() override { require_ok(ncclGroupEnd(), "ncclGroupEnd", comm_); }

  health check() override {
    if (comm_ == nullptr) return {result::internal_error, "the communicator was aborted", errc::transport};
    ncclResult_t state = ncclSuccess;
    const ncclResult_t asked = ncclCommGetAsyncError(comm_, &state);
    if (asked != ncclSuccess) state = asked;
    const auto now = static_cast<result>(state);
    health answer{now, {}, category_of(now)};
    if (answer.failed()) answer.detail = describe(state, comm_);
    return answer;
  }

  bool stream_idle(stream_handle stream) override {
    const cudaError_t status = cudaStreamQuery(on(stream));
    if (status == cudaSuccess) return true;
    if (status == cudaErrorNotReady) return false;
    cuda::detail::check(status, "cudaStreamQuery");  // throws: the stream's work failed
    return false;
  }

  void finalize() override { require_ok(ncclCommFinalize(comm_), "ncclCommFinalize", comm_); }
  void abort() noexcept override {
    if (comm_ != nullptr) (void)ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  static cudaStream_t on(stream_handle stream) noexcept { return static_cast<cudaStream_t>(stream); }

  ncclComm_t comm_;
  int device_;
};

class library final : public adapter {
 public:
  std::string name() const override { return nccl_version(); }

  // 0 where CUDA has no device or no driver; connect() then says why.
  int devices() override {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return count;
  }

  unique_id new_id() override {
    ncclUniqueId id{};
    require_ok(ncclGetUniqueId(&id), "ncclGetUniqueId");
    static_assert(sizeof id == sizeof(unique_id));
    unique_id bytes{};
    std::memcpy(bytes.data(), &id, sizeof id);
    return bytes;
  }

  std::unique_ptr<endpoint> connect(chorus::communicator& group, const unique_id& id, int device) override {
    const cudaError_t selected = cudaSetDevice(device);
    if (selected != cudaSuccess) (void)cudaGetLastError();
    ncclUniqueId raw{};
    std::memcpy(&raw, id.data(), sizeof raw);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t comm = nullptr;
    // Asked even without a device, so that the error names NCCL's answer too.
    const ncclResult_t made = ncclCommInitRankConfig(&comm, group.size(), raw, group.rank(), &config);
    if (selected == cudaSuccess && (made == ncclSuccess || made == ncclInProgress))
      return std::make_unique<library_endpoint>(comm, device);
    std::string why = nccl_version() + " on device " + std::to_string(device) + ": cudaSetDevice: " +
                      (selected == cudaSuccess ? std::string("ok") : cuda::detail::describe(selected)) +
                      "; ncclCommInitRankConfig: " + describe(made, comm);
    if (comm != nullptr) (void)ncclCommAbort(comm);
    throw error(selected != cudaSuccess ? errc::unavailable : category_of(static_cast<result>(made)),
                "no NCCL communicator: " + why, {group.transport().rank(), -1, "nccl connect"});
  }

  bool moves(const void* pointer) const noexcept override {
    return cuda::memory_kind_of(pointer) == memory_kind::cuda_device;
  }
};

}  // namespace detail

// The NCCL library as an adapter, for nccl::communicator's constructor.
inline std::shared_ptr<adapter> library() { return std::make_shared<detail::library>(); }

// An NCCL communicator over `from`'s ranks, one GPU each: collective over `from`.
inline communicator connect(chorus::communicator& from, options given = {}) {
  return communicator(from, library(), given);
}

}  // namespace chorus::nccl
