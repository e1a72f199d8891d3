// Every kernel of cuda/kernels.cuh gives the CPU code's bits. Run twice:
// `test_kernels` runs the kernels' own functions serially on this thread
// (on_host_thread: warp steps emulated), here and in CI; `test_kernels
// --device` (ctest label `gpu`; scripts/test-gpu runs it) runs them on the
// GPU, and exits 77 (skipped, with the reason) where there is none. Codecs: encode, decode,
// decode_add and three error-feedback steps, over sizes that do not fill a
// block, blocks holding NaN and inf, subnormals and huge values. Reductions:
// every op over float, double, half, bfloat16, int32 and int64, both operand
// orders. The one allowed difference: where both results are NaN, their
// payloads may differ (the GPU's arithmetic returns a canonical NaN).
#include <chorus/codec/error_feedback.hpp>
#include <chorus/collective/machinery/reduce_local.hpp>
#include <chorus/compressed/scaling.hpp>
#include <chorus/cuda/kernels.cuh>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (ok) return;
  ++failures;
  if (failures <= 20) std::fprintf(stderr, "FAILED: %s\n", what.c_str());
}

template <class T>
class device_buffer {
 public:
  explicit device_buffer(std::size_t n) : n_(n) {
    chorus::cuda::detail::check(cudaMalloc(reinterpret_cast<void**>(&data_), std::max<std::size_t>(n, 1) * sizeof(T)),
                                "cudaMalloc");
  }
  explicit device_buffer(const std::vector<T>& host) : device_buffer(host.size()) { upload(host); }
  ~device_buffer() { (void)cudaFree(data_); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  T* get() const { return data_; }
  void upload(const std::vector<T>& host) {
    chorus::cuda::detail::check(cudaMemcpy(data_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  std::vector<T> download() const {
    std::vector<T> host(n_);
    chorus::cuda::detail::check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    chorus::cuda::detail::check(cudaMemcpy(host.data(), data_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return host;
  }

 private:
  T* data_ = nullptr;
  std::size_t n_;
};

template <class T>
class host_buffer {
 public:
  explicit host_buffer(std::size_t n) : data_(n) {}
  explicit host_buffer(const std::vector<T>& host) : data_(host) {}
  T* get() { return data_.data(); }
  void upload(const std::vector<T>& host) { data_ = host; }
  std::vector<T> download() const { return data_; }

 private:
  std::vector<T> data_;
};

// Where the kernels run and what memory they run over.
struct on_gpu {
  template <class T>
  using buffer = device_buffer<T>;
  static cudaStream_t where() { return nullptr; }
};
struct on_this_thread {
  template <class T>
  using buffer = host_buffer<T>;
  static chorus::cuda::kernels::on_host_thread where() { return {}; }
};

std::uint64_t next(std::uint64_t& state) {
  state = state * 6364136223846793005ull + 1442695040888963407ull;
  return state >> 33;
}

// Mostly ordinary gradients; some blocks hold zeros, subnormals, huge
// values, and (when `specials`) NaN and inf.
std::vector<float> inputs(std::size_t n, std::uint64_t seed, bool specials) {
  std::vector<float> x(n);
  std::uint64_t state = seed;
  for (std::size_t i = 0; i < n; ++i) {
    const auto r = next(state);
    const float u = static_cast<float>(r % 2000001) / 1000000.0f - 1.0f;
    switch ((i / 64) % 7) {
      case 1: x[i] = u * 1e-41f; break;  // subnormal
      case 2: x[i] = u * 3e38f; break;   // beyond fp16, near float's limit
      case 3: x[i] = (r % 3 == 0) ? 0.0f : -0.0f; break;
      case 4: x[i] = specials && r % 50 == 0 ? (r % 100 == 0 ? INFINITY : NAN) : u; break;
      default: x[i] = u * 4.0f;
    }
  }
  return x;
}

bool same(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0 || (std::isnan(a) && std::isnan(b)); }
template <class T>
bool same(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a) && std::isnan(b)) return true;
  } else if constexpr (requires { a.is_nan(); }) {
    if (a.is_nan() && b.is_nan()) return true;
  }
  return std::memcmp(&a, &b, sizeof a) == 0;
}
template <class T>
bool same(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!same(a[i], b[i])) return false;
  return true;
}

// Encoded bytes, compared as the codec's elements: fp16 and bf16 words that
// are NaN on both sides count as equal (the allowed difference above: an
// error-feedback residual that overflowed to infinity turns into NaN, and
// the GPU's NaN is canonical where x86 keeps the operand's payload).
template <class Codec>
bool same_encoding(const std::vector<std::byte>& a, const std::vector<std::byte>& b) {
  using namespace chorus::codec;
  if constexpr (std::is_same_v<Codec, fp16> || std::is_same_v<Codec, bf16>) {
    using word = std::conditional_t<std::is_same_v<Codec, fp16>, chorus::half, chorus::bfloat16>;
    if (a.size() != b.size() || a.size() % 2 != 0) return false;
    for (std::size_t i = 0; i < a.size(); i += 2) {
      std::uint16_t x, y;
      std::memcpy(&x, &a[i], 2);
      std::memcpy(&y, &b[i], 2);
      if (!same(word::from_bits(x), word::from_bits(y))) return false;
    }
    return true;
  } else {
    return a == b;
  }
}

template <class Side, class Codec>
void codec_matches_cpu(const Codec& c, const std::string& name, std::size_t n) {
  const std::string where = name + " n=" + std::to_string(n);
  const std::vector<float> in = inputs(n, n + 1, true);
  std::vector<std::byte> cpu_bytes(c.encoded_bytes(n));
  c.encode(in, cpu_bytes);

  typename Side::template buffer<float> d_in(in);
  typename Side::template buffer<std::byte> d_bytes(cpu_bytes.size());
  chorus::cuda::kernels::encode(c, d_in.get(), d_bytes.get(), n, Side::where());
  expect(same_encoding<Codec>(d_bytes.download(), cpu_bytes), where + ": encode");

  std::vector<float> cpu_decoded(n);
  c.decode(cpu_bytes, cpu_decoded);
  d_bytes.upload(cpu_bytes);
  typename Side::template buffer<float> d_out(n);
  chorus::cuda::kernels::decode(c, d_bytes.get(), d_out.get(), n, Side::where());
  expect(same(d_out.download(), cpu_decoded), where + ": decode");

  std::vector<float> accumulate = inputs(n, 7 * n + 3, false);
  d_out.upload(accumulate);
  c.decode_add(cpu_bytes, accumulate);
  chorus::cuda::kernels::decode_add(c, d_bytes.get(), d_out.get(), n, Side::where());
  expect(same(d_out.download(), accumulate), where + ": decode_add");

  chorus::codec::error_feedback<Codec> feedback{c};
  typename Side::template buffer<float> d_residual(std::vector<float>(n, 0.0f)), d_work(n);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> values = inputs(n, 31 * n + static_cast<std::size_t>(step), false);
    feedback.encode(values, cpu_bytes);
    d_in.upload(values);
    chorus::cuda::kernels::error_feedback_encode(c, d_in.get(), d_residual.get(), d_work.get(), d_bytes.get(), n,
                                                 Side::where());
    const std::vector<float> cpu_residual(feedback.residual().begin(), feedback.residual().end());
    expect(same_encoding<Codec>(d_bytes.download(), cpu_bytes),
           where + ": error feedback encode, step " + std::to_string(step));
    expect(n == 0 || same(d_residual.download(), cpu_residual),
           where + ": error feedback residual, step " + std::to_string(step));
  }
}

template <class T>
std::vector<T> typed(std::size_t n, std::uint64_t seed) {
  std::vector<T> values(n);
  std::uint64_t state = seed;
  for (auto& v : values) {
    const auto r = next(state);
    if constexpr (std::is_integral_v<T>)
      v = static_cast<T>(static_cast<std::int64_t>(r % 2001) - 1000);
    else
      v = static_cast<T>(static_cast<float>(r % 2000001) / 1000.0f - 1000.0f);
  }
  return values;
}

// The host collectives' order: widen, reduce in the accumulator type, finalize, narrow once.
template <class Side, class T, class Op>
void reduction_matches_cpu(const Op& op, const std::string& name, std::size_t n) {
  using A = chorus::accumulator_t<T>;
  for (bool lower : {false, true}) {
    const std::string where = name + " n=" + std::to_string(n) + (lower ? " incoming lower" : "");
    const std::vector<T> mine = typed<T>(n, n + 5), theirs = typed<T>(n, n + 9);
    std::vector<A> acc(mine.begin(), mine.end()), incoming(theirs.begin(), theirs.end());
    chorus::collective::reduce_into(std::span(acc), std::span<const A>(incoming), op, lower);
    chorus::collective::finalize_all(std::span(acc), op, 2);
    std::vector<T> expected(n);
    for (std::size_t i = 0; i < n; ++i) expected[i] = static_cast<T>(acc[i]);

    typename Side::template buffer<T> d_mine(mine), d_theirs(theirs);
    typename Side::template buffer<A> d_acc(n), d_incoming(n);
    chorus::cuda::kernels::widen(d_acc.get(), d_mine.get(), n, Side::where());
    chorus::cuda::kernels::widen(d_incoming.get(), d_theirs.get(), n, Side::where());
    chorus::cuda::kernels::reduce_into(d_acc.get(), d_incoming.get(), n, op, lower, Side::where());
    chorus::cuda::kernels::finalize(d_acc.get(), n, op, 2, Side::where());
    chorus::cuda::kernels::narrow(d_mine.get(), d_acc.get(), n, Side::where());
    expect(same(d_mine.download(), expected), where);
  }
}

// The compressed collectives' prescale, its undoing and the average
// (compressed/scaling.hpp and the schemes' division), and the zeroed sum.
template <class Side>
void scaling_matches_cpu(std::size_t n) {
  const std::string where = "scaling n=" + std::to_string(n);
  const std::vector<float> in = inputs(n, 3 * n + 1, true);
  for (const float factor : {0.25f, 3.0f, 1.0f / 3.0f}) {
    std::vector<float> expected(n);
    chorus::compressed::scale_into(in, expected, factor);
    typename Side::template buffer<float> d_in(in), d_out(n);
    chorus::cuda::kernels::multiply(d_in.get(), d_out.get(), n, factor, Side::where());
    expect(same(d_out.download(), expected), where + ": multiply by " + std::to_string(factor));
    std::vector<float> divided = in;
    for (float& value : divided) value /= factor;
    chorus::cuda::kernels::divide(d_in.get(), n, factor, Side::where());
    expect(same(d_in.download(), divided), where + ": divide by " + std::to_string(factor));
  }
  typename Side::template buffer<float> d_zero(in);
  chorus::cuda::kernels::zero(d_zero.get(), n, Side::where());
  expect(same(d_zero.download(), std::vector<float>(n, 0.0f)), where + ": zero");
}

template <class Side, class T>
void every_op(const std::string& type, std::size_t n) {
  reduction_matches_cpu<Side, T>(chorus::op::sum{}, type + " sum", n);
  reduction_matches_cpu<Side, T>(chorus::op::prod{}, type + " prod", n);
  reduction_matches_cpu<Side, T>(chorus::op::min{}, type + " min", n);
  reduction_matches_cpu<Side, T>(chorus::op::max{}, type + " max", n);
  reduction_matches_cpu<Side, T>(chorus::op::avg{}, type + " avg", n);
}

template <class Side>
void every_kernel() {
  using namespace chorus::codec;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{33}, std::size_t{256},
                        std::size_t{1000}, std::size_t{(1u << 20) + 3}}) {
    codec_matches_cpu<Side>(fp16{}, "fp16", n);
    codec_matches_cpu<Side>(fp16{overflow::infinity}, "fp16 (overflow to infinity)", n);
    codec_matches_cpu<Side>(bf16{}, "bf16", n);
    codec_matches_cpu<Side>(bf16{overflow::infinity}, "bf16 (overflow to infinity)", n);
    codec_matches_cpu<Side>(int8{}, "int8", n);
    codec_matches_cpu<Side>(int8{8}, "int8 block 8", n);
    codec_matches_cpu<Side>(int8{40}, "int8 block 40", n);
    codec_matches_cpu<Side>(fp8_e4m3{}, "fp8_e4m3", n);
    codec_matches_cpu<Side>(fp8_e5m2{8}, "fp8_e5m2 block 8", n);
    codec_matches_cpu<Side>(fp4_e2m1{}, "fp4_e2m1", n);
    codec_matches_cpu<Side>(fp4_e2m1{40}, "fp4_e2m1 block 40", n);
    codec_matches_cpu<Side>(onebit{}, "onebit", n);
    codec_matches_cpu<Side>(onebit{8}, "onebit block 8", n);
    codec_matches_cpu<Side>(onebit{72}, "onebit block 72", n);
    scaling_matches_cpu<Side>(n);
    every_op<Side, float>("float", n);
    every_op<Side, double>("double", n);
    every_op<Side, chorus::half>("half", n);
    every_op<Side, chorus::bfloat16>("bfloat16", n);
    every_op<Side, std::int32_t>("int32", n);
    every_op<Side, std::int64_t>("int64", n);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool on_device = argc > 1 && std::string(argv[1]) == "--device";
  if (on_device && !chorus::cuda::available()) {
    std::printf("skipped: no CUDA device (cudaGetDeviceCount fails or reports none)\n");
    return 77;
  }
  if (on_device)
    every_kernel<on_gpu>();
  else
    every_kernel<on_this_thread>();
  if (failures != 0) {
    std::fprintf(stderr, "%d checks failed\n", failures);
    return 1;
  }
  std::printf("every kernel, run %s, matched the CPU bit for bit\n", on_device ? "on the GPU" : "on this thread");
  return 0;
}
