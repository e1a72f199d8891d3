// Run under chorus-run -n N: every collective, point-to-point, the
// compressed allreduce, D-PSGD's device mixing and window slots in device
// memory (put, update, accumulate, publish, get) on device buffers through
// the direct path (device pointers handed to UCX as they are,
// CHORUS_CUDA_PATH=direct: any refusal is an error), each against the same
// call on host memory with the same algorithm, bit for bit, and every
// rank's results against every other's. Counts 0, 1, 7 and two that divide
// by nothing, so blocks are uneven.
//
// Built twice: `direct_check` on the tests' fake device (its memory faults
// on any host access; UCX is handed a host alias of it), run by ctest as
// separate processes; `gpu_direct_check` on the CUDA runtime and the device
// kernels, which needs a UCX that moves CUDA memory (PyPI's libucx-cu13):
// several processes on one GPU then move real device memory (cuda_ipc), as
// scripts/gpu-bundle's run does. Exit 0 only if everything matched; 77 where
// there is no GPU (gpu_direct_check).
#include "../collective_cases.hpp"
#include "../window_rounds.hpp"

#include <chorus/averaging/dpsgd.hpp>
#include <chorus/compressed/compressed_allreduce.hpp>
#include <chorus/cuda/router.hpp>

#if CHORUS_DIRECT_CHECK_GPU
#include <chorus/cuda/runtime.hpp>
namespace perf {
chorus::cuda::device_compute& device_kernels();  // tools/perf/device_kernels.cu
}  // namespace perf
#else
#include "../fake_compute.hpp"
#include "../fake_device.hpp"
#endif

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

using namespace chorus_test;

namespace {

constexpr std::size_t counts[] = {0, 1, 7, 1001, 40009};

// Device memory through the device-operations interface alone (the same
// code for the fake and the GPU): allocations, and copies in and out on
// the default stream, waited for.
class device_buffers {
 public:
  explicit device_buffers(chorus::cuda::device_operations& ops) : ops_(ops), done_(ops.create_event()) {}
  ~device_buffers() {
    for (void* p : owned_) ops_.free_device(p);
    ops_.destroy_event(done_);
  }
  device_buffers(const device_buffers&) = delete;
  device_buffers& operator=(const device_buffers&) = delete;

  template <class T>
  T* copy_of(const std::vector<T>& host) {
    auto* device = static_cast<T*>(ops_.allocate_device(std::max<std::size_t>(host.size(), 1) * sizeof(T)));
    owned_.push_back(device);
    if (!host.empty()) copy(device, host.data(), host.size() * sizeof(T));
    return device;
  }
  template <class T>
  std::vector<T> read(const T* device, std::size_t count) {
    std::vector<T> host(count);
    if (count != 0) copy(host.data(), device, count * sizeof(T));
    return host;
  }
  void copy(void* to, const void* from, std::size_t bytes) {
    ops_.copy_async(to, from, bytes, nullptr);
    ops_.record(done_, nullptr);
    while (!ops_.completed(done_)) {}
  }
  void release_all() {
    for (void* p : owned_) ops_.free_device(p);
    owned_.clear();
  }

 private:
  chorus::cuda::device_operations& ops_;
  chorus::cuda::event_handle done_;
  std::vector<void*> owned_;
};

struct tally {
  std::size_t cases = 0, wrong = 0;
  std::vector<std::uint64_t> prints;

  // `everywhere`: a result every rank holds alike (an allreduce's, not a scatter's).
  template <class T>
  void compare(const char* what, std::size_t count, const std::vector<T>& device, const std::vector<T>& host,
               bool everywhere = false) {
    ++cases;
    const bool same = device.size() == host.size() &&
                      (host.empty() || std::memcmp(device.data(), host.data(), host.size() * sizeof(T)) == 0);
    if (!same) {
      ++wrong;
      std::printf("direct_check: %s, count %zu: the device's result differs from the host's\n", what, count);
    }
    if (everywhere) prints.push_back(fingerprint(host.data(), host.size() * sizeof(T)));
  }
};

template <class T, class Op>
void allreduce_cases(chorus::communicator& comm, device_buffers& gpu, tally& t, Op op, const char* what,
                     flavour kind = flavour::general) {
  for (const auto algorithm :
       {chorus::algo::ring, chorus::algo::tree, chorus::algo::recursive_doubling, chorus::algo::rabenseifner})
    for (const std::size_t count : counts) {
      std::vector<T> host = inputs<T>(comm.rank(), count, 11, kind);
      T* device = gpu.copy_of(host);
      chorus::allreduce(comm, std::span(device, count), op, algorithm);
      chorus::allreduce(comm, std::span(host), op, algorithm);
      t.compare((std::string("allreduce ") + what + " " + std::string(chorus::to_string(algorithm))).c_str(), count,
                gpu.read(device, count), host, true);
      gpu.release_all();
    }
}

void moving_cases(chorus::communicator& comm, device_buffers& gpu, tally& t) {
  const int n = comm.size(), me = comm.rank(), root = n - 1;
  for (const std::size_t block : counts) {
    const std::size_t all = block * static_cast<std::size_t>(n);
    const std::vector<float> mine = inputs<float>(me, block, 12, flavour::general);
    const std::vector<float> many = inputs<float>(me + 10, all, 13, flavour::general);
    for (const auto algorithm : {chorus::algo::tree, chorus::algo::chain}) {
      std::vector<float> host = me == root ? many : std::vector<float>(all, -1.0f);
      float* device = gpu.copy_of(host);
      chorus::broadcast(comm, std::span(device, all), root, algorithm);
      chorus::broadcast(comm, std::span(host), root, algorithm);
      t.compare("broadcast", all, gpu.read(device, all), host, true);
    }
    for (const auto algorithm : {chorus::algo::ring, chorus::algo::recursive_doubling}) {
      std::vector<float> host(all, -1.0f), in_place(all, 0.0f);
      std::copy(mine.begin(), mine.end(), in_place.begin() + static_cast<std::ptrdiff_t>(block * me));
      float *d_mine = gpu.copy_of(mine), *d_all = gpu.copy_of(host), *d_in_place = gpu.copy_of(in_place);
      chorus::allgather(comm, std::span<const float>(d_mine, block), std::span(d_all, all), algorithm);
      chorus::allgather(comm, std::span<const float>(mine), std::span(host), algorithm);
      t.compare("allgather", block, gpu.read(d_all, all), host, true);
      chorus::allgather(comm, std::span(d_in_place, all), algorithm);
      chorus::allgather(comm, std::span(in_place), algorithm);
      t.compare("allgather in place", block, gpu.read(d_in_place, all), in_place, true);
    }
    for (const auto algorithm : {chorus::algo::ring, chorus::algo::recursive_halving}) {
      std::vector<float> host(block, -1.0f);
      float *d_many = gpu.copy_of(many), *d_out = gpu.copy_of(host);
      chorus::reduce_scatter(comm, std::span<const float>(d_many, all), std::span(d_out, block), chorus::op::sum{},
                             algorithm);
      chorus::reduce_scatter(comm, std::span<const float>(many), std::span(host), chorus::op::sum{}, algorithm);
      t.compare("reduce_scatter", block, gpu.read(d_out, block), host);
    }
    {
      std::vector<double> input = inputs<double>(me, block, 14, flavour::general), output(block, -1.0);
      double *d_input = gpu.copy_of(input), *d_output = gpu.copy_of(output);
      chorus::reduce(comm, std::span<const double>(d_input, block), std::span(d_output, block), root,
                     chorus::op::sum{});
      chorus::reduce(comm, std::span<const double>(input), std::span(output), root, chorus::op::sum{});
      t.compare("reduce", block, gpu.read(d_output, block), output);
    }
    {
      std::vector<float> gathered(all, -1.0f), scattered(block, -1.0f), exchanged(all, -1.0f);
      float *d_mine = gpu.copy_of(mine), *d_many = gpu.copy_of(many), *d_gathered = gpu.copy_of(gathered),
            *d_scattered = gpu.copy_of(scattered), *d_exchanged = gpu.copy_of(exchanged);
      chorus::gather(comm, std::span<const float>(d_mine, block), std::span(d_gathered, all), root);
      chorus::scatter(comm, std::span<const float>(d_many, all), std::span(d_scattered, block), root);
      chorus::alltoall(comm, std::span<const float>(d_many, all), std::span(d_exchanged, all));
      chorus::gather(comm, std::span<const float>(mine), std::span(gathered), root);
      chorus::scatter(comm, std::span<const float>(many), std::span(scattered), root);
      chorus::alltoall(comm, std::span<const float>(many), std::span(exchanged));
      t.compare("gather", block, gpu.read(d_gathered, all), gathered);
      t.compare("scatter", block, gpu.read(d_scattered, block), scattered);
      t.compare("alltoall", block, gpu.read(d_exchanged, all), exchanged);
    }
    {  // a ring of sends, blocking and not
      const int right = (me + 1) % n, left = (me + n - 1) % n;
      std::vector<double> from_left(block, -1.0);
      double *d_mine = gpu.copy_of(inputs<double>(me, block, 15, flavour::general)), *d_theirs = gpu.copy_of(from_left);
      std::array<chorus::communicator::request, 2> both{comm.irecv(std::span(d_theirs, block), left, 5),
                                                        comm.isend(std::span<const double>(d_mine, block), right, 5)};
      comm.wait_all(both);
      t.compare("send/recv", block, gpu.read(d_theirs, block), inputs<double>(left, block, 15, flavour::general));
    }
    gpu.release_all();
  }
}

template <class Coder>
void compressed_cases(chorus::communicator& comm, device_buffers& gpu, tally& t, const Coder& coder,
                      const std::string& name) {
  for (const auto scheme : {chorus::compression_scheme::ring, chorus::compression_scheme::encode_once})
    for (const std::size_t count : counts) {
      chorus::compression_options options;
      options.scheme = scheme;
      Coder on_device = coder, on_host = coder;  // error feedback carries a residual per path
      std::vector<float> host = inputs<float>(comm.rank(), count, 16, flavour::general);
      float* device = gpu.copy_of(host);
      for (int step = 0; step < 2; ++step) {
        chorus::allreduce(comm, std::span(device, count), chorus::op::avg{}, on_device, options);
        chorus::allreduce(comm, std::span(host), chorus::op::avg{}, on_host, options);
      }
      t.compare(("compressed allreduce " + name + " " + std::string(chorus::compressed::scheme_name(scheme))).c_str(),
                count, gpu.read(device, count), host, true);
      gpu.release_all();
    }
}

// D-PSGD on a ring: the model on the device mixes there (device_mixing.hpp)
// and its rounds carry device buffers; four steps end with the host run's bits.
void scheme_cases(chorus::communicator& comm, device_buffers& gpu, tally& t) {
  const int n = comm.size();
  if (n < 2) return;
  for (const char* wire : {"", "fp16", "int8"}) {
    const chorus::averaging::dpsgd_options options{chorus::averaging::topology::ring(n),
                                                   *wire ? chorus::codec::by_name(wire) : chorus::codec::any_codec()};
    std::vector<float> host = inputs<float>(comm.rank(), 40009, 17, flavour::general);
    float* device = gpu.copy_of(host);
    chorus::averaging::dpsgd on_host(comm, chorus::averaging::parameters({std::span(host)}), options);
    chorus::averaging::dpsgd on_device(comm, chorus::averaging::parameters({std::span(device, host.size())}), options);
    for (int step = 0; step < 4; ++step) {
      const std::vector<float> gradient = inputs<float>(comm.rank(), host.size(), 18 + step, flavour::general);
      on_host.step([] {},
                   [&] {
                     for (std::size_t k = 0; k < host.size(); ++k) host[k] -= 0.01f * gradient[k];
                   });
      on_device.step([] {},
                     [&] {
                       std::vector<float> now = gpu.read(device, host.size());
                       for (std::size_t k = 0; k < now.size(); ++k) now[k] -= 0.01f * gradient[k];
                       float* updated = gpu.copy_of(now);
                       gpu.copy(device, updated, now.size() * sizeof(float));
                     });
    }
    t.compare((std::string("D-PSGD ") + (*wire ? wire : "float")).c_str(), host.size(), gpu.read(device, host.size()),
              host);
    gpu.release_all();
  }
}

// A window over device memory keeps its slots there (forced direct: any
// refusal is a failure) and gives the host window's bits: put, update,
// accumulate with error feedback, publish and get (window_rounds.hpp).
void window_cases(chorus::communicator& comm, device_buffers& gpu, tally& t) {
  if (comm.size() < 2) return;
  for (const char* wire : {"", "fp16", "int8", "fp4_e2m1"})
    for (const std::size_t count : {std::size_t{1}, std::size_t{1001}, std::size_t{40009}}) {
      float* device = gpu.copy_of(std::vector<float>(count));
      const auto write = [&](const std::vector<float>& values) {
        gpu.copy(device, values.data(), count * sizeof(float));
        return std::span<float>(device, count);
      };
      const auto read = [&](std::span<const float> values) { return gpu.read(values.data(), values.size()); };
      std::size_t wrong = 0;
      const bool on_device = chorus_test::window_rounds(
          comm, count, *wire ? chorus::codec::by_name(wire) : chorus::codec::any_codec(), write, read,
          [&](const char* what) {
            std::printf("direct_check: %s %s, count %zu: the device window's result differs from the host's\n", what,
                        *wire ? wire : "float", count);
            ++wrong;
          });
      if (!on_device) std::printf("direct_check: a window over device memory kept its slots in host memory\n");
      t.cases += 1;
      t.wrong += wrong > 0 || !on_device ? 1 : 0;
      gpu.release_all();
    }
}

int check(chorus::cuda::device& device, chorus::cuda::device_compute& kernels) {
  chorus::communicator comm = chorus::init();
  // Forced: a call the direct path refuses (UCX moves no CUDA memory, or
  // registers a buffer as host memory) is an error, not a quiet staging.
  chorus::cuda::router router(device, {}, &kernels, chorus::cuda::path_setting::direct);
  const chorus::cuda::route_front_doors routing(router);
  device_buffers gpu(device.operations());
  tally t;
  allreduce_cases<float>(comm, gpu, t, chorus::op::sum{}, "float sum");
  allreduce_cases<double>(comm, gpu, t, chorus::op::avg{}, "double avg");
  allreduce_cases<std::int32_t>(comm, gpu, t, chorus::op::max{}, "int32 max");
  allreduce_cases<std::int64_t>(comm, gpu, t, chorus::op::prod{}, "int64 prod", flavour::product);
  moving_cases(comm, gpu, t);
  scheme_cases(comm, gpu, t);
  window_cases(comm, gpu, t);
  compressed_cases(comm, gpu, t, chorus::codec::fp16{}, "fp16");
  compressed_cases(comm, gpu, t, chorus::codec::bf16{}, "bf16");
  compressed_cases(comm, gpu, t, chorus::codec::int8{64}, "int8");
  compressed_cases(comm, gpu, t, chorus::codec::error_feedback(chorus::codec::fp4_e2m1{}), "fp4 with error feedback");
  compressed_cases(comm, gpu, t, chorus::codec::fp8_e4m3{}, "fp8");
  compressed_cases(comm, gpu, t, chorus::codec::error_feedback(chorus::codec::onebit{72}),
                   "onebit with error feedback");
  // Every rank holds the same results: fingerprints compared through an allgather.
  const std::size_t n = static_cast<std::size_t>(comm.size());
  std::vector<std::uint64_t> everyone(t.prints.size() * n);
  chorus::allgather(comm, std::span<const std::uint64_t>(t.prints), std::span(everyone));
  std::size_t mismatched = 0;
  for (std::size_t r = 0; r < n; ++r)
    for (std::size_t i = 0; i < t.prints.size(); ++i) mismatched += everyone[r * t.prints.size() + i] != t.prints[i];
  std::printf("direct_check rank %d of %d: %zu cases, %zu wrong, %zu differing from another rank's\n", comm.rank(),
              comm.size(), t.cases, t.wrong, mismatched);
  return t.wrong == 0 && mismatched == 0 ? 0 : 1;
}

}  // namespace

int main() {
  try {
#if CHORUS_DIRECT_CHECK_GPU
    if (!chorus::cuda::available()) {
      std::printf("gpu_direct_check: no CUDA device here\n");
      return 77;
    }
    return check(chorus::cuda::runtime(), perf::device_kernels());
#else
    fake_device fake;  // stands in for a UCX that moves CUDA memory
    chorus::cuda::device device(fake);
    fake_compute kernels(fake);
    return check(device, kernels);
#endif
  } catch (const chorus::error& failure) {
    std::printf("direct_check: %s\n", failure.what());
    return 1;
  }
}
