// chorus-perf: collective benchmarks in nccl-tests units.
//
//   chorus-run -n 4 chorus-perf allreduce -b 8 -e 256M -f 2 [--algo ring|rd|rabenseifner|tree|shm|shm_small|hierarchical|auto]
//       [--dtype float|double|half|bfloat16|int8|int32|int64|uint8|uint32|uint64]
//       [--op sum|prod|min|max|avg] [--root 0] [-n iters] [-w warmup] [-c 0|1] [--json out.json]
//       [--auto-iters BYTES]   (repeat small sizes until BYTES moved, up to 2000 iterations;
//                               default 64M, or exactly -n iters where only -n is given)
//       [--codec fp16|bf16|int8|onebit|identity|topk:R|randomk:R[:SEED]]   (allreduce, float, sum|avg: compressed)
//       [--scheme ring|once|sparse]   (with --codec: force the compressed scheme; default automatic)
//       [--device host|cuda]   (cuda: the buffers are CUDA device memory, one GPU per rank
//                               by local rank, staged through pinned host memory)
//       [--backend ucx|nccl|both]  (with --device cuda: chorus over UCX, over an NCCL
//                               communicator, or both tables in one run, UCX's first)
//
//   chorus-run -n N chorus-perf calibrate [--out FILE] [--rounds R] [--max BYTES]
//       measures this machine's latencies, bandwidths and reduction cost and
//       writes the file CHORUS_MACHINE reads (perf/calibrate.cpp)
//
// Collectives: allreduce, broadcast, reduce, allgather, reduce_scatter,
// alltoall, gather, scatter, and sendrecv (point-to-point: each rank sends to
// the next, as nccl-tests' sendrecv_perf).
// Sizes are nccl-tests' "size": the bytes of the largest buffer a rank
// touches (allgather/gather: the gathered output; reduce_scatter/scatter: the
// full input; alltoall: either buffer). The columns, the timing and #wrong
// are the harness's (perf/harness.hpp); each collective is described in its
// own file, perf/<collective>.cpp, which says its sizes, bus factor, in-place
// form, call and check (perf/collective.hpp says how). To add a collective:
// write its file, list it below and in tools/CMakeLists.txt.
#include "perf/calibrate.hpp"
#include "perf/collective.hpp"

#include <chorus/codec/any_codec.hpp>
#include <chorus/collective/allreduce/allreduce.hpp>
#include <chorus/init.hpp>
#include <chorus/registry.hpp>
#if CHORUS_PERF_CUDA
#include <chorus/cuda/router.hpp>
#include <chorus/cuda/runtime.hpp>
#endif
#if CHORUS_PERF_NCCL
#include <chorus/nccl/library.hpp>
#endif

#include <algorithm>
#include <array>
#include <climits>
#include <cstdio>
#include <string>
#include <string_view>

namespace {

#if CHORUS_PERF_KERNELS
}  // namespace
namespace perf {
chorus::cuda::device_compute& device_kernels();  // perf/device_kernels.cu, compiled by nvcc
}  // namespace perf
namespace {
#endif

#if CHORUS_PERF_CUDA
// --device cuda: buffers from cudaMalloc on this rank's GPU (local rank
// modulo the device count), routed through every front door: staged, or
// direct where UCX moves CUDA memory (CHORUS_CUDA_PATH; the reductions and
// codecs run on the GPU where nvcc built the kernels in).
class cuda_memory final : public perf::device_memory {
 public:
  explicit cuda_memory(int local_rank) {
    int devices = 0;
    check(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    check(cudaSetDevice(local_rank % devices), "cudaSetDevice");
    device_ = local_rank % devices;
  }
  std::string name() const override {
    return "CUDA device " + std::to_string(device_) +
           " memory (staged through pinned host memory, or direct where UCX moves it: CHORUS_CUDA_PATH)";
  }
  void* allocate(std::size_t bytes) override {
    void* data = nullptr;
    check(cudaMalloc(&data, bytes), "cudaMalloc");
    return data;
  }
  void release(void* data) noexcept override { (void)cudaFree(data); }
  void upload(void* device, const void* host, std::size_t bytes) override {
    check(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  void download(void* host, const void* device, std::size_t bytes) override {
    check(cudaMemcpy(host, device, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
  }
  void copy(void* to, const void* from, std::size_t bytes) override {
    check(cudaMemcpy(to, from, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
  }
  int device() const noexcept { return device_; }

 private:
  static void check(cudaError_t status, const char* call) { chorus::cuda::detail::check(status, call); }
  int device_ = 0;
};
#endif

#if CHORUS_PERF_CUDA
// --backend: chorus over UCX, NCCL, or both in one run (UCX's table first,
// then NCCL's, on the same GPU's buffers): the worst exit status.
int run_backends(const perf::collective& chosen, chorus::communicator& comm, perf::options& config, int device) {
  int status = 0;
  if (config.backend != "nccl") status = chosen.run(comm, config);
  if (config.backend == "ucx") return status;
#if CHORUS_PERF_NCCL
  chorus::nccl::options on_device;
  on_device.device = device;
  chorus::nccl::communicator gpus = chorus::nccl::connect(comm, on_device);
  config.nccl = &gpus;
  status = std::max(status, chosen.run(comm, config));
  config.nccl = nullptr;
  return status;
#else
  (void)device;
  throw chorus::error(chorus::errc::unavailable, "--backend nccl: this chorus-perf was built without NCCL");
#endif
}
#endif

// Runs `chosen` with the buffers where --device puts them.
int run_on_device(const perf::collective& chosen, chorus::communicator& comm, perf::options& config) {
  if (config.device == "host") return chosen.run(comm, config);
#if CHORUS_PERF_CUDA
  chorus::cuda::device& gpu = chorus::cuda::runtime();  // unavailable without a GPU: a clear error
  cuda_memory memory(static_cast<int>(chorus::env::get_integer("CHORUS_LOCAL_RANK", 0, INT_MAX).value_or(comm.rank())));
  chorus::cuda::device_compute* kernels = nullptr;  // without nvcc: reductions staged
#if CHORUS_PERF_KERNELS
  kernels = &perf::device_kernels();
#endif
  chorus::cuda::router router(gpu, {}, kernels);
  const chorus::cuda::route_front_doors routing(router);
  config.memory = &memory;
  return run_backends(chosen, comm, config, memory.device());
#else
  throw chorus::error(chorus::errc::unavailable, "--device cuda: this chorus-perf was built without the CUDA toolkit");
#endif
}

const std::array<const perf::collective*, 9> collectives{
    &perf::allreduce_entry, &perf::broadcast_entry,      &perf::reduce_entry,
    &perf::allgather_entry, &perf::reduce_scatter_entry, &perf::alltoall_entry,
    &perf::gather_entry,    &perf::scatter_entry,        &perf::sendrecv_entry};

// An empty problem is --help: the usage on stdout, exit status 0.
[[noreturn]] void usage(const std::string& problem) {
  std::FILE* out = problem.empty() ? stdout : stderr;
  if (!problem.empty()) std::fprintf(out, "chorus-perf: %s\n", problem.c_str());
  std::fprintf(out,
               "usage: chorus-perf COLLECTIVE %s [--algo A] [--dtype T] [--op OP] [--root R] [--codec C] [--scheme "
               "ring|once|sparse] [--device host|cuda] [--backend ucx|nccl|both]\n",
               std::string(perf::sweep_usage).c_str());
  std::fprintf(out, "collectives:");
  for (const perf::collective* c : collectives) std::fprintf(out, " %s", std::string(c->name).c_str());
  std::fprintf(out,
               "\ntypes: %s\nRun it under a launcher, e.g. chorus-run -n 4 chorus-perf allreduce -b 8 -e 64M -f 2\n",
               std::string(perf::dtype_names).c_str());
  std::exit(problem.empty() ? 0 : 2);
}

chorus::compression_scheme parse_scheme(std::string_view text) {
  for (const auto scheme :
       {chorus::compression_scheme::ring, chorus::compression_scheme::encode_once, chorus::compression_scheme::sparse})
    if (text == chorus::compressed::scheme_name(scheme)) return scheme;
  throw perf::usage_error("unknown --scheme '" + std::string(text) + "' (ring, once, sparse)");
}

const perf::collective& find(std::string_view name) {
  for (const perf::collective* c : collectives)
    if (c->name == name) return *c;
  throw perf::usage_error("unknown collective '" + std::string(name) + "'");
}

void take_flag(perf::options& parsed, std::string_view flag, std::string_view value) {
  if (perf::take_sweep_flag(parsed, flag, value)) return;
  if (flag == "--algo")
    parsed.algorithm = chorus::parse_algorithm(value, "--algo");
  else if (flag == "--dtype")
    parsed.dtype = value;
  else if (flag == "--op")
    parsed.op = value;
  else if (flag == "--root")
    parsed.root = perf::count_argument(value);
  else if (flag == "--codec")
    parsed.codec = value;
  else if (flag == "--scheme")
    parsed.scheme = parse_scheme(value);
  else if (flag == "--backend") {
    if (value != "ucx" && value != "nccl" && value != "both")
      throw perf::usage_error("unknown --backend '" + std::string(value) + "' (ucx, nccl, both)");
    parsed.backend = value;
  } else if (flag == "--device") {
    if (value != "host" && value != "cuda")
      throw perf::usage_error("unknown --device '" + std::string(value) + "' (host, cuda)");
    parsed.device = value;
  } else
    throw perf::usage_error("unknown option " + std::string(flag));
}

// --codec, --scheme and --algo apply only where the collective has them;
// --algo is spelt as its list spells it ("rd" runs as recursive_doubling).
void check_choices(perf::options& parsed) {
  if (!parsed.codec.empty()) {
    if (parsed.collective != "allreduce" || parsed.dtype != "float" || (parsed.op != "sum" && parsed.op != "avg"))
      throw perf::usage_error("--codec applies to allreduce of float with --op sum or avg");
    if (parsed.algorithm != chorus::algorithm::automatic)
      throw perf::usage_error("--codec and --algo exclude each other");
    try {
      if (!chorus::codec::by_name(parsed.codec)) throw perf::usage_error("--codec none: leave --codec out");
    } catch (const chorus::error& bad) {
      throw perf::usage_error("--codec: " + std::string(bad.what()) + " (" + perf::codec_names() + ")");
    }
  }
  if (parsed.scheme != chorus::compression_scheme::automatic && parsed.codec.empty())
    throw perf::usage_error("--scheme needs --codec");
  if (parsed.backend != "ucx") {
    if (parsed.device != "cuda")
      throw perf::usage_error("--backend " + parsed.backend + " needs --device cuda: NCCL moves device memory");
    if (parsed.algorithm != chorus::algorithm::automatic || parsed.scheme != chorus::compression_scheme::automatic)
      throw perf::usage_error("--backend " + parsed.backend +
                              ": NCCL chooses its own algorithms (no --algo or --scheme)");
  }
  if (parsed.algorithm == chorus::algorithm::automatic) return;
  const auto& selecting = chorus::selecting_collectives;
  const bool selects = std::find(selecting.begin(), selecting.end(), parsed.collective) != selecting.end();
  const chorus::collective_entry* entry = selects ? &chorus::registered(parsed.collective) : nullptr;
  const chorus::algorithm_facts* offered = entry ? entry->find(parsed.algorithm) : nullptr;
  if (offered == nullptr)
    throw perf::usage_error("--algo " + std::string(chorus::to_string(parsed.algorithm)) + " does not apply to " +
                            parsed.collective + (entry ? " (it has " + entry->list() + ")" : ""));
  parsed.algorithm = offered->id;
}

// The collective to run, with its options checked.
const perf::collective& parse(int argc, char** argv, perf::options& parsed) {
  if (argc < 2) throw perf::usage_error("no collective given");
  parsed.collective = argv[1];
  const perf::collective& chosen = find(parsed.collective);
  for (int i = 2; i < argc; i += 2) {
    if (i + 1 >= argc) throw perf::usage_error(std::string(argv[i]) + " needs a value");
    take_flag(parsed, argv[i], argv[i + 1]);
  }
  perf::validate(parsed);
  check_choices(parsed);
  perf::with_dtype(parsed.dtype, [](auto) { return 0; });  // an unknown type fails here, before init
  perf::with_op(parsed.op, [](auto) { return 0; });
  return parsed.codec.empty() ? chosen : perf::compressed_allreduce_entry;
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") usage("");
  if (argc > 1 && std::string_view(argv[1]) == "calibrate") {
    try {
      chorus::communicator comm = chorus::init();
      return perf::calibrate(comm, argc, argv);
    } catch (const std::invalid_argument& problem) {
      usage(problem.what());
    } catch (const std::exception& failure) {
      std::fprintf(stderr, "chorus-perf calibrate: %s\n", failure.what());
      return 1;
    }
  }
  perf::options config;
  const perf::collective* chosen = nullptr;
  try {
    chosen = &parse(argc, argv, config);
  } catch (const perf::usage_error& problem) {
    usage(problem.what());
  } catch (const chorus::error& problem) {  // --algo names no algorithm
    usage(problem.what());
  }
  try {
    chorus::communicator comm = chorus::init();
    if (config.root >= comm.size()) usage("--root must be below the rank count");
    return run_on_device(*chosen, comm, config);
  } catch (const chorus::error& failure) {
    std::fprintf(stderr, "chorus-perf: %s\n", failure.what());
    return 1;
  }
}
