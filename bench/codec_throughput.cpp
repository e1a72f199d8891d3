// Codec throughput per core next to memcpy on the same buffer, in one run.
//
//   build/bench/codec_throughput [--benchmark_min_time=0.2]
//
// Each benchmark moves a float tensor of N elements (4 MiB, in cache, and
// 64 MiB, out of cache): memcpy copies it, encode turns it into the codec's
// bytes, decode and decode_add turn those bytes back into floats. GB/s counts
// the float bytes (4 N) per second for all of them, so the closing table's
// ratios say how a codec step compares with copying the tensor once.
#include <chorus/codec.hpp>

#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace {

namespace codec = chorus::codec;

std::vector<float> gradient_like(std::size_t n) {
  std::mt19937 gen(7);
  std::normal_distribution<float> normal(0.0f, 0.01f);
  std::vector<float> v(n);
  for (float& x : v) x = normal(gen);
  return v;
}

void set_rate(benchmark::State& state, std::size_t n) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * static_cast<std::int64_t>(n * sizeof(float)));
}

void BM_memcpy(benchmark::State& state) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto in = gradient_like(n);
  std::vector<float> out(n);
  for (auto _ : state) {
    std::memcpy(out.data(), in.data(), n * sizeof(float));
    benchmark::ClobberMemory();
  }
  set_rate(state, n);
}

enum class step { encode, decode, decode_add };

template <class Codec>
void BM_codec(benchmark::State& state, Codec c, step what) {
  const auto n = static_cast<std::size_t>(state.range(0));
  const auto values = gradient_like(n);
  std::vector<std::byte> bytes(c.encoded_bytes(n));
  std::vector<float> out(n, 0.0f);
  c.encode(values, bytes);
  for (auto _ : state) {
    if (what == step::encode)
      c.encode(values, bytes);
    else if (what == step::decode)
      c.decode(bytes, out);
    else
      c.decode_add(bytes, out);
    benchmark::ClobberMemory();
  }
  set_rate(state, n);
}

template <class Codec>
void register_codec(const std::string& name, Codec vector_path, Codec portable) {
  for (auto [label, what] :
       {std::pair{"encode", step::encode}, {"decode", step::decode}, {"decode_add", step::decode_add}}) {
    benchmark::RegisterBenchmark(("BM_" + name + "_" + label + "/avx2").c_str(), BM_codec<Codec>, vector_path, what)
        ->Arg(1 << 20)
        ->Arg(1 << 24);
    benchmark::RegisterBenchmark(("BM_" + name + "_" + label + "/portable").c_str(), BM_codec<Codec>, portable, what)
        ->Arg(1 << 20)
        ->Arg(1 << 24);
  }
}

// Prints Google Benchmark's usual lines and keeps each run's GB/s.
class ratio_reporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      const auto rate = run.counters.find("bytes_per_second");
      if (rate != run.counters.end()) gbps[run.benchmark_name()] = rate->second.value / 1e9;
    }
  }
  std::map<std::string, double> gbps;
};

void print_ratios(const std::map<std::string, double>& gbps) {
  std::printf("\n| step | elements | GB/s | memcpy GB/s | / memcpy |\n|---|---|---|---|---|\n");
  for (const auto& [name, rate] : gbps) {
    if (name.rfind("BM_memcpy", 0) == 0) continue;
    const std::string size = name.substr(name.rfind('/') + 1);
    const auto copy = gbps.find("BM_memcpy/" + size);
    if (copy == gbps.end()) continue;
    std::printf("| %s | %s | %.2f | %.2f | %.2f |\n", name.substr(3, name.rfind('/') - 3).c_str(), size.c_str(), rate,
                copy->second, rate / copy->second);
  }
}

}  // namespace

BENCHMARK(BM_memcpy)->Arg(1 << 20)->Arg(1 << 24);

int main(int argc, char** argv) {
  using codec::simd_path;
  register_codec("fp16", codec::fp16({}, simd_path::avx2), codec::fp16({}, simd_path::portable));
  register_codec("bf16", codec::bf16({}, simd_path::avx2), codec::bf16({}, simd_path::portable));
  register_codec("int8", codec::int8(256, simd_path::avx2), codec::int8(256, simd_path::portable));
  register_codec("onebit", codec::onebit(256, simd_path::avx2), codec::onebit(256, simd_path::portable));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf("codec paths: this CPU runs %s\n", std::string(codec::to_string(codec::best_path())).c_str());
  ratio_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_ratios(reporter.gbps);
  benchmark::Shutdown();
}
