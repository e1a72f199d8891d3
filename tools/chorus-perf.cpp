// chorus-perf: collective benchmarks in nccl-tests units.
//
//   chorus-run -n 4 chorus-perf allreduce -b 8 -e 256M -f 2 [--algo ring|rd|rabenseifner|tree|auto]
//       [--dtype float|double|half|bfloat16|int8|int32|int64|uint8|uint32|uint64]
//       [--op sum|prod|min|max|avg] [--root 0] [-n iters] [-w warmup] [-c 0|1] [--json out.json]
//       [--auto-iters BYTES]   (repeat small sizes until BYTES moved, up to 2000 iterations)
//       [--codec fp16|bf16|int8|onebit|identity]   (allreduce, float, sum|avg: compressed)
//       [--scheme ring|once]   (with --codec: force the compressed scheme; default automatic)
//
// Collectives: allreduce, broadcast, reduce, allgather, reduce_scatter,
// alltoall, gather, scatter. Sizes are nccl-tests' "size": the bytes of the
// largest buffer a rank touches (allgather/gather: the gathered output;
// reduce_scatter/scatter: the full input; alltoall: either buffer).
//
// Per size and for out-of-place and in-place: time (us) is the mean over
// ranks of each rank's mean time per iteration, with the fastest and slowest
// rank's; algbw = size / time (GB/s, 10^9); busbw = algbw * factor, with
// nccl-tests' factors (allreduce 2(n-1)/n; allgather, reduce_scatter,
// alltoall (n-1)/n; the others 1); #wrong counts elements of the last
// iteration that differ from the expected result (inputs are small integers
// so every result is exact). A closing line gives the average busbw.
// With --codec, #wrong counts elements outside the codec's stated bound of
// the exact result (chorus/compressed/error_bound.hpp); sizes stay the
// float tensor's bytes, so busbw compares directly with uncompressed runs.
#include <chorus/chorus.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <functional>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

// Parsed once, so the timed loop dispatches on an enum, not on strings.
enum class collective_kind { allreduce, broadcast, reduce, allgather, reduce_scatter, alltoall, gather, scatter };

inline constexpr std::pair<std::string_view, collective_kind> collective_names[] = {
    {"allreduce", collective_kind::allreduce}, {"broadcast", collective_kind::broadcast},
    {"reduce", collective_kind::reduce},       {"allgather", collective_kind::allgather},
    {"reduce_scatter", collective_kind::reduce_scatter}, {"alltoall", collective_kind::alltoall},
    {"gather", collective_kind::gather},       {"scatter", collective_kind::scatter}};

inline constexpr std::string_view codec_names[] = {"fp16", "bf16", "int8", "onebit", "identity"};

struct settings {
  std::string collective;
  collective_kind kind = collective_kind::allreduce;
  std::size_t min_bytes = 8, max_bytes = 64u << 20, factor = 2;
  chorus::algorithm algorithm = chorus::algorithm::automatic;
  std::string dtype = "float", op = "sum";
  int root = 0, iterations = 20, warmup = 5;
  bool check = true;
  std::size_t auto_bytes = 0;  // --auto-iters: at least this many bytes per measurement
  std::string json;
  std::string codec;  // --codec: compressed allreduce
  chorus::compression_scheme scheme = chorus::compression_scheme::automatic;  // --scheme
};

// An empty problem is --help: the usage on stdout, exit status 0.
[[noreturn]] void usage(const std::string& problem) {
  std::FILE* out = problem.empty() ? stdout : stderr;
  if (!problem.empty()) std::fprintf(out, "chorus-perf: %s\n", problem.c_str());
  std::fprintf(out,
               "usage: chorus-perf COLLECTIVE [-b MIN] [-e MAX] [-f FACTOR] [--algo A] "
               "[--dtype T] [--op OP] [--root R] [-n ITERS] [-w WARMUP] [-c 0|1] [--json FILE] [--auto-iters BYTES] [--codec C] "
               "[--scheme ring|once]\n"
               "collectives: allreduce broadcast reduce allgather reduce_scatter alltoall gather scatter\n"
               "Run it under a launcher, e.g. chorus-run -n 4 chorus-perf allreduce -b 8 -e 64M -f 2\n");
  std::exit(problem.empty() ? 0 : 2);
}

std::size_t size_argument(std::string_view text) {
  const auto value = chorus::env::parse_size(text);
  if (!value) usage("bad size '" + std::string(text) + "'");
  return *value;
}

int int_argument(std::string_view text) {
  const auto value = chorus::env::parse_integer(text);
  if (!value || *value < 0 || *value > 1000000) usage("bad number '" + std::string(text) + "'");
  return static_cast<int>(*value);
}

chorus::compression_scheme parse_scheme(std::string_view text) {
  for (const auto scheme : {chorus::compression_scheme::ring, chorus::compression_scheme::encode_once})
    if (text == chorus::compressed::scheme_name(scheme)) return scheme;
  usage("unknown --scheme '" + std::string(text) + "' (ring, once)");
}

settings parse(int argc, char** argv) {
  if (argc < 2) usage("no collective given");
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]) == "--help" || std::string_view(argv[i]) == "-h") usage("");
  settings parsed;
  parsed.collective = argv[1];
  const auto* named = std::find_if(std::begin(collective_names), std::end(collective_names),
                                   [&](const auto& entry) { return entry.first == parsed.collective; });
  if (named == std::end(collective_names)) usage("unknown collective '" + parsed.collective + "'");
  parsed.kind = named->second;
  for (int i = 2; i < argc; i += 2) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) usage(std::string(flag) + " needs a value");
    const std::string_view value = argv[i + 1];
    if (flag == "-b") parsed.min_bytes = size_argument(value);
    else if (flag == "-e") parsed.max_bytes = size_argument(value);
    else if (flag == "-f") parsed.factor = size_argument(value);
    else if (flag == "--algo") parsed.algorithm = chorus::parse_algorithm(value, "--algo");
    else if (flag == "--dtype") parsed.dtype = value;
    else if (flag == "--op") parsed.op = value;
    else if (flag == "--root") parsed.root = int_argument(value);
    else if (flag == "-n") parsed.iterations = std::max(1, int_argument(value));
    else if (flag == "-w") parsed.warmup = int_argument(value);
    else if (flag == "-c") parsed.check = int_argument(value) != 0;
    else if (flag == "--json") parsed.json = value;
    else if (flag == "--auto-iters") parsed.auto_bytes = size_argument(value);
    else if (flag == "--codec") parsed.codec = value;
    else if (flag == "--scheme") parsed.scheme = parse_scheme(value);
    else usage("unknown option " + std::string(flag));
  }
  if (parsed.factor < 2) usage("-f must be at least 2");
  if (parsed.min_bytes == 0 || parsed.min_bytes > parsed.max_bytes) usage("need 0 < -b <= -e");
  const collective_kind c = parsed.kind;
  const bool has_choice = c == collective_kind::allreduce || c == collective_kind::broadcast || c == collective_kind::allgather || c == collective_kind::reduce_scatter ||
                          (c == collective_kind::reduce && parsed.algorithm == chorus::algorithm::tree);
  if (!parsed.codec.empty()) {
    if (c != collective_kind::allreduce || parsed.dtype != "float" || (parsed.op != "sum" && parsed.op != "avg"))
      usage("--codec applies to allreduce of float with --op sum or avg");
    if (parsed.algorithm != chorus::algorithm::automatic) usage("--codec and --algo exclude each other");
    if (std::find(std::begin(codec_names), std::end(codec_names), parsed.codec) == std::end(codec_names))
      usage("unknown --codec '" + parsed.codec + "' (fp16, bf16, int8, onebit, identity)");
  }
  if (parsed.scheme != chorus::compression_scheme::automatic && parsed.codec.empty()) usage("--scheme needs --codec");
  if (parsed.algorithm != chorus::algorithm::automatic && !has_choice)
    usage("--algo " + std::string(chorus::to_string(parsed.algorithm)) + " does not apply to " + parsed.collective);
  return parsed;
}

// The bus bandwidth factor nccl-tests uses for each collective.
double bus_factor(collective_kind c, int n) {
  const double ranks = n;
  if (c == collective_kind::allreduce) return 2 * (ranks - 1) / ranks;
  if (c == collective_kind::allgather || c == collective_kind::reduce_scatter || c == collective_kind::alltoall) return (ranks - 1) / ranks;
  return 1;
}

// Small integers, so every sum, product, min, max and avg is exact in every type.
template <class T>
T input_at(int rank, std::size_t index, const std::string& op) {
  if (op == "prod") return static_cast<T>(static_cast<float>(1 + (index + static_cast<std::size_t>(rank)) % 2));
  return static_cast<T>(static_cast<float>((index * 7 + static_cast<std::size_t>(rank) * 3) % 5));
}

template <class T, class Op>
T expected_reduction(int ranks, std::size_t index, const std::string& op, Op combine) {
  using A = chorus::accumulator_t<T>;
  A total = static_cast<A>(input_at<T>(0, index, op));
  for (int r = 1; r < ranks; ++r) total = combine(total, static_cast<A>(input_at<T>(r, index, op)));
  return static_cast<T>(chorus::op::finalize(combine, total, static_cast<std::size_t>(ranks)));
}

// A compressed allreduce picked at run time: the call, and the stated error
// bound of its result for known contributions.
class compressed_hook {
 public:
  virtual ~compressed_hook() = default;
  virtual void allreduce(chorus::communicator& comm, std::span<float> data, bool average) = 0;
  // `total` is the tensor's element count: it decides the scheme.
  virtual std::vector<float> bound(std::span<const std::vector<float>> contributions, std::size_t total) const = 0;
  virtual chorus::compression_scheme scheme(int ranks, std::size_t total) const = 0;
  virtual std::size_t granule() const = 0;
};

template <class Codec>
class compressed_with : public compressed_hook {
 public:
  compressed_with(Codec c, chorus::compression_scheme scheme) : codec_(c) { options_.scheme = scheme; }
  void allreduce(chorus::communicator& comm, std::span<float> data, bool average) override {
    if (average) chorus::allreduce(comm, data, chorus::op::avg{}, codec_, options_);
    else chorus::allreduce(comm, data, chorus::op::sum{}, codec_, options_);
  }
  std::vector<float> bound(std::span<const std::vector<float>> contributions, std::size_t total) const override {
    chorus::compression_options resolved = options_;
    resolved.scheme = scheme(static_cast<int>(contributions.size()), total);
    return chorus::compressed::allreduce_error_bound(codec_, contributions, resolved);
  }
  chorus::compression_scheme scheme(int ranks, std::size_t total) const override {
    return chorus::compressed::scheme_for(codec_, ranks, total, options_);
  }
  std::size_t granule() const override { return codec_.granule(); }

 private:
  Codec codec_;
  chorus::compression_options options_;
};

std::shared_ptr<compressed_hook> make_compressed(const std::string& name, chorus::compression_scheme scheme) {
  namespace codec = chorus::codec;
  if (name.empty()) return nullptr;
  if (name == "fp16") return std::make_shared<compressed_with<codec::fp16>>(codec::fp16{}, scheme);
  if (name == "bf16") return std::make_shared<compressed_with<codec::bf16>>(codec::bf16{}, scheme);
  if (name == "int8") return std::make_shared<compressed_with<codec::int8>>(codec::int8{}, scheme);
  if (name == "onebit") return std::make_shared<compressed_with<codec::onebit>>(codec::onebit{}, scheme);
  return std::make_shared<compressed_with<codec::identity>>(codec::identity{}, scheme);  // the one name left (parse checked)
}

struct measurement {
  double mean_us = 0, min_us = 0, max_us = 0;
  std::size_t wrong = 0;
};

struct row {
  std::size_t bytes = 0, count = 0;
  std::string algorithm;
  measurement out_of_place, in_place;
};

// One collective at one size for element type T and operator Op: buffers,
// the call, and the expected contents of the output after it.
template <class T, class Op>
class benchmark_case {
 public:
  benchmark_case(chorus::communicator& comm, const settings& config, std::size_t bytes, Op op,
                 std::shared_ptr<compressed_hook> compressed = nullptr)
      : comm_(comm), config_(config), op_(op), n_(static_cast<std::size_t>(comm.size())), compressed_(std::move(compressed)) {
    const collective_kind c = config.kind;
    const std::size_t elements = std::max<std::size_t>(1, bytes / sizeof(T));
    const bool per_rank_blocks = c == collective_kind::allgather || c == collective_kind::reduce_scatter || c == collective_kind::alltoall || c == collective_kind::gather || c == collective_kind::scatter;
    block_ = per_rank_blocks ? elements / n_ : elements;
    input_size_ = c == collective_kind::allgather || c == collective_kind::gather ? block_ : per_rank_blocks ? block_ * n_ : block_;
    output_size_ = c == collective_kind::reduce_scatter || c == collective_kind::scatter ? block_ : per_rank_blocks ? block_ * n_ : block_;
    input_.resize(std::max(input_size_, output_size_));
    output_.resize(std::max(input_size_, output_size_));
  }

  std::size_t count() const noexcept { return block_; }
  std::size_t bytes() const noexcept { return std::max(input_size_, output_size_) * sizeof(T); }

  void fill() {
    for (std::size_t i = 0; i < input_.size(); ++i) input_[i] = input_at<T>(comm_.rank(), i, config_.op);
    std::fill(output_.begin(), output_.end(), T{});
  }

  // Runs once; returns the algorithm that ran.
  chorus::algorithm run(bool in_place) {
    const collective_kind c = config_.kind;
    const auto in = std::span<const T>(input_).first(input_size_);
    const auto out = std::span<T>(output_).first(output_size_);
    const auto& forced = config_.algorithm;
    if constexpr (std::is_same_v<T, float>) {
      if (compressed_) {
        if (!in_place) std::copy(in.begin(), in.end(), out.begin());
        compressed_->allreduce(comm_, in_place ? std::span<T>(input_).first(input_size_) : out, config_.op == "avg");
        return chorus::algorithm::automatic;
      }
    }
    if (c == collective_kind::allreduce) {
      if (in_place) return chorus::allreduce(comm_, std::span<T>(input_).first(input_size_), op_, forced);
      return chorus::allreduce(comm_, in, out, op_, forced);
    }
    if (c == collective_kind::broadcast) {
      if (in_place) return chorus::broadcast(comm_, std::span<T>(input_).first(input_size_), config_.root, forced);
      if (comm_.rank() == config_.root) std::copy(in.begin(), in.end(), out.begin());
      return chorus::broadcast(comm_, out, config_.root, forced);
    }
    if (c == collective_kind::reduce) {
      if (in_place) return chorus::reduce(comm_, std::span<T>(input_).first(input_size_), config_.root, op_);
      return chorus::reduce(comm_, in, out, config_.root, op_);
    }
    if (c == collective_kind::allgather) {
      if (in_place) {
        const auto all = std::span<T>(input_).first(block_ * n_);
        return chorus::allgather(comm_, all, forced);  // own block sits at rank * count
      }
      return chorus::allgather(comm_, in, out, forced);
    }
    if (c == collective_kind::reduce_scatter) return chorus::reduce_scatter(comm_, in, out, op_, forced);
    if (c == collective_kind::alltoall) return chorus::alltoall(comm_, in, out);
    if (c == collective_kind::gather) {
      chorus::gather(comm_, in, out, config_.root);
      return chorus::algorithm::automatic;
    }
    chorus::scatter(comm_, in, out, config_.root);  // the one kind left
    return chorus::algorithm::automatic;
  }

  bool has_in_place() const {
    const collective_kind c = config_.kind;
    return c == collective_kind::allreduce || c == collective_kind::broadcast || c == collective_kind::reduce || c == collective_kind::allgather;
  }

  std::size_t count_wrong(bool in_place) const {
    const collective_kind c = config_.kind;
    const int n = comm_.size(), rank = comm_.rank();
    const std::vector<T>& result = in_place ? input_ : output_;
    const auto differ = [](T got, T want) { return std::memcmp(&got, &want, sizeof(T)) != 0; };
    std::size_t wrong = 0;
    if constexpr (std::is_same_v<T, float>)
      if (compressed_) return outside_codec_bound(result);
    if (c == collective_kind::allreduce || (c == collective_kind::reduce && rank == config_.root)) {
      for (std::size_t i = 0; i < block_; ++i) wrong += differ(result[i], expected_reduction<T>(n, i, config_.op, op_));
    } else if (c == collective_kind::broadcast) {
      for (std::size_t i = 0; i < block_; ++i) wrong += differ(result[i], input_at<T>(config_.root, i, config_.op));
    } else if (c == collective_kind::allgather || (c == collective_kind::gather && rank == config_.root)) {
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < block_; ++i)
          wrong += differ(result[static_cast<std::size_t>(r) * block_ + i],
                          input_at<T>(r, in_place ? static_cast<std::size_t>(r) * block_ + i : i, config_.op));
    } else if (c == collective_kind::reduce_scatter) {
      for (std::size_t i = 0; i < block_; ++i)
        wrong += differ(result[i], expected_reduction<T>(n, static_cast<std::size_t>(rank) * block_ + i, config_.op, op_));
    } else if (c == collective_kind::alltoall) {
      for (int r = 0; r < n; ++r)
        for (std::size_t i = 0; i < block_; ++i)
          wrong += differ(result[static_cast<std::size_t>(r) * block_ + i], input_at<T>(r, static_cast<std::size_t>(rank) * block_ + i, config_.op));
    } else if (c == collective_kind::scatter) {
      for (std::size_t i = 0; i < block_; ++i)
        wrong += differ(result[i], input_at<T>(config_.root, static_cast<std::size_t>(rank) * block_ + i, config_.op));
    }
    return wrong;
  }

  // Elements farther from the exact sum (or average) than the codec's stated
  // bound, computed a chunk of whole codec blocks at a time.
  std::size_t outside_codec_bound(const std::vector<float>& result) const {
    const int n = comm_.size();
    const double divisor = config_.op == "avg" ? n : 1;
    const std::size_t chunk = compressed_->granule() * std::max<std::size_t>(1, (1u << 16) / compressed_->granule());
    std::size_t wrong = 0;
    std::vector<std::vector<float>> contributions(n_);
    for (std::size_t first = 0; first < block_; first += chunk) {
      const std::size_t count = std::min(chunk, block_ - first);
      for (int r = 0; r < n; ++r) {
        auto& x = contributions[static_cast<std::size_t>(r)];
        x.resize(count);
        for (std::size_t k = 0; k < count; ++k) x[k] = input_at<float>(r, first + k, config_.op);
      }
      const std::vector<float> bound = compressed_->bound(contributions, block_);
      for (std::size_t k = 0; k < count; ++k) {
        double exact = 0;
        for (const auto& x : contributions) exact += x[k];
        wrong += !(std::fabs(result[first + k] - exact / divisor) <= bound[k] / divisor * (1 + 1e-6));
      }
    }
    return wrong;
  }

  // In-place allgather expects every rank's own block at rank * count of
  // the same buffer: put it there (the timing loop leaves it in place).
  void prepare_in_place() {
    if (config_.kind != collective_kind::allgather) return;
    for (std::size_t i = 0; i < input_.size(); ++i) input_[i] = input_at<T>(comm_.rank(), i, config_.op);
  }

 private:
  chorus::communicator& comm_;
  const settings& config_;
  Op op_;
  std::size_t n_, block_ = 0, input_size_ = 0, output_size_ = 0;
  std::vector<T> input_, output_;
  std::shared_ptr<compressed_hook> compressed_;
};

// Mean, min and max over ranks of this rank's mean seconds per iteration.
measurement across_ranks(chorus::communicator& comm, double seconds) {
  std::array<double, 1> sum{seconds}, low{seconds}, high{seconds};
  chorus::allreduce(comm, std::span(sum), chorus::op::sum{});
  chorus::allreduce(comm, std::span(low), chorus::op::min{});
  chorus::allreduce(comm, std::span(high), chorus::op::max{});
  return {sum[0] / comm.size() * 1e6, low[0] * 1e6, high[0] * 1e6, 0};
}

template <class T, class Op>
measurement time_case(chorus::communicator& comm, const settings& config, benchmark_case<T, Op>& bench, bool in_place,
                      chorus::algorithm& used) {
  bench.fill();
  if (in_place) bench.prepare_in_place();
  for (int i = 0; i < config.warmup; ++i) bench.run(in_place);
  // Small messages take microseconds: with --auto-iters they repeat until
  // BYTES have moved (at most 2000 times), so one hiccup does not dominate.
  const int iterations = config.auto_bytes == 0 ? config.iterations
                         : static_cast<int>(std::clamp<std::size_t>(config.auto_bytes / std::max<std::size_t>(1, bench.bytes()),
                                                                    static_cast<std::size_t>(config.iterations), 2000));
  comm.barrier();
  const auto start = clock_type::now();
  for (int i = 0; i < iterations; ++i) used = bench.run(in_place);
  const double seconds = std::chrono::duration<double>(clock_type::now() - start).count() / iterations;
  measurement result = across_ranks(comm, seconds);
  if (config.check) {
    bench.fill();
    if (in_place) bench.prepare_in_place();
    bench.run(in_place);
    std::array<std::uint64_t, 1> wrong{bench.count_wrong(in_place)};
    chorus::allreduce(comm, std::span(wrong), chorus::op::sum{});
    result.wrong = wrong[0];
  }
  return result;
}

void print_header(const chorus::communicator& comm, const settings& config) {
  std::printf("# chorus-perf %s: %d ranks, dtype %s, op %s, root %d, %d iterations after %d warm-up, check %s%s%s\n",
              config.collective.c_str(), comm.size(), config.dtype.c_str(), config.op.c_str(), config.root,
              config.iterations, config.warmup, config.check ? "on" : "off",
              config.codec.empty() ? "" : ", codec ", config.codec.c_str());
  std::printf("#%11s %10s %9s %6s %19s   %-39s   %-39s\n", "", "", "", "", "", "out-of-place", "in-place");
  std::printf("#%11s %10s %9s %6s %19s %9s %17s %7s %7s %6s %9s %17s %7s %7s %6s\n", "size(B)", "count", "type", "op",
              "algo", "time(us)", "min-max(us)", "algbw", "busbw", "#wrong", "time(us)", "min-max(us)", "algbw",
              "busbw", "#wrong");
}

// Data-movement collectives have no reduction operator.
std::string op_column(const settings& config) {
  const collective_kind c = config.kind;
  return c == collective_kind::allreduce || c == collective_kind::reduce || c == collective_kind::reduce_scatter ? config.op : "-";
}

std::string cells(const measurement& m, std::size_t bytes, double factor, bool present) {
  char text[128];
  if (!present) {
    std::snprintf(text, sizeof text, "%9s %17s %7s %7s %6s", "n/a", "", "", "", "");
    return text;
  }
  const double algbw = static_cast<double>(bytes) / (m.mean_us * 1e-6) / 1e9;
  char range[40];
  std::snprintf(range, sizeof range, "%.1f-%.1f", m.min_us, m.max_us);
  std::snprintf(text, sizeof text, "%9.1f %17s %7.2f %7.2f %6zu", m.mean_us, range, algbw, algbw * factor, m.wrong);
  return text;
}

std::string json_row(const row& r, const settings& config, int ranks, double factor, bool in_place_present) {
  std::ostringstream out;
  const auto entry = [&](const char* name, const measurement& m) {
    const double algbw = static_cast<double>(r.bytes) / (m.mean_us * 1e-6) / 1e9;
    out << "\"" << name << "\": {\"time_us\": " << m.mean_us << ", \"min_us\": " << m.min_us << ", \"max_us\": "
        << m.max_us << ", \"algbw_gbps\": " << algbw << ", \"busbw_gbps\": " << algbw * factor << ", \"wrong\": " << m.wrong
        << "}";
  };
  out << "{\"collective\": \"" << config.collective << "\", \"ranks\": " << ranks << ", \"size\": " << r.bytes
      << ", \"count\": " << r.count << ", \"type\": \"" << config.dtype << "\", \"op\": \"" << config.op
      << "\", \"algo\": \"" << r.algorithm << "\", ";
  entry("out_of_place", r.out_of_place);
  if (in_place_present) {
    out << ", ";
    entry("in_place", r.in_place);
  }
  out << "}";
  return out.str();
}

template <class T, class Op>
int sweep(chorus::communicator& comm, const settings& config, Op op) {
  if (comm.rank() == 0) print_header(comm, config);
  const double factor = bus_factor(config.kind, comm.size());
  std::vector<std::string> json_rows;
  double busbw_total = 0;
  int rows = 0;
  std::size_t total_wrong = 0;
  std::size_t sizes = 0;
  for (std::size_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= config.factor) ++sizes;
  std::size_t done = 0;
  const std::shared_ptr<compressed_hook> compressed = make_compressed(config.codec, config.scheme);
  for (std::size_t bytes = config.min_bytes; bytes <= config.max_bytes; bytes *= config.factor) {
    benchmark_case<T, Op> bench(comm, config, bytes, op, compressed);
    row r;
    r.bytes = bench.bytes();
    r.count = bench.count();
    chorus::algorithm used = chorus::algorithm::automatic;
    r.out_of_place = time_case(comm, config, bench, false, used);
    const bool in_place = bench.has_in_place();
    if (in_place) r.in_place = time_case(comm, config, bench, true, used);
    r.algorithm = compressed ? config.codec + "/" + std::string(chorus::compressed::scheme_name(compressed->scheme(comm.size(), r.count)))
                  : used == chorus::algorithm::automatic ? "-" : std::string(chorus::to_string(used));
    total_wrong += r.out_of_place.wrong + r.in_place.wrong;
    const double algbw = static_cast<double>(r.bytes) / (r.out_of_place.mean_us * 1e-6) / 1e9;
    busbw_total += algbw * factor;
    ++rows;
    if (comm.rank() == 0) {
      std::printf(" %11zu %10zu %9s %6s %19s %s %s\n", r.bytes, r.count, config.dtype.c_str(), op_column(config).c_str(),
                  r.algorithm.c_str(), cells(r.out_of_place, r.bytes, factor, true).c_str(),
                  cells(r.in_place, r.bytes, factor, in_place).c_str());
      std::fflush(stdout);
      if (sizes > 8) std::fprintf(stderr, "chorus-perf: %zu/%zu sizes done\n", ++done, sizes);
      json_rows.push_back(json_row(r, config, comm.size(), factor, in_place));
    }
    if (bytes > config.max_bytes / config.factor) break;
  }
  if (comm.rank() == 0) {
    std::printf("# Out of bounds values : %zu %s\n# Avg bus bandwidth    : %.3f GB/s\n", total_wrong,
                total_wrong ? "FAILED" : "OK", rows ? busbw_total / rows : 0.0);
    if (!config.json.empty()) {
      std::ofstream file(config.json);
      file << "[\n";
      for (std::size_t i = 0; i < json_rows.size(); ++i) file << "  " << json_rows[i] << (i + 1 < json_rows.size() ? ",\n" : "\n");
      file << "]\n";
      if (!file) std::fprintf(stderr, "chorus-perf: cannot write %s\n", config.json.c_str());
    }
  }
  return total_wrong == 0 ? 0 : 1;
}

template <class T>
int with_op(chorus::communicator& comm, const settings& config) {
  if (config.op == "sum") return sweep<T>(comm, config, chorus::op::sum{});
  if (config.op == "prod") return sweep<T>(comm, config, chorus::op::prod{});
  if (config.op == "min") return sweep<T>(comm, config, chorus::op::min{});
  if (config.op == "max") return sweep<T>(comm, config, chorus::op::max{});
  if (config.op == "avg") return sweep<T>(comm, config, chorus::op::avg{});
  usage("unknown --op '" + config.op + "'");
}

int with_type(chorus::communicator& comm, const settings& config) {
  const std::string& t = config.dtype;
  if (t == "float") return with_op<float>(comm, config);
  if (t == "double") return with_op<double>(comm, config);
  if (t == "half") return with_op<chorus::half>(comm, config);
  if (t == "bfloat16") return with_op<chorus::bfloat16>(comm, config);
  if (t == "int8") return with_op<std::int8_t>(comm, config);
  if (t == "int32") return with_op<std::int32_t>(comm, config);
  if (t == "int64") return with_op<std::int64_t>(comm, config);
  if (t == "uint8") return with_op<std::uint8_t>(comm, config);
  if (t == "uint32") return with_op<std::uint32_t>(comm, config);
  if (t == "uint64") return with_op<std::uint64_t>(comm, config);
  usage("unknown --dtype '" + t + "'");
}

}  // namespace

int main(int argc, char** argv) {
  const settings config = parse(argc, argv);
  try {
    chorus::communicator comm = chorus::init();
    if (config.root >= comm.size()) usage("--root must be below the rank count");
    return with_type(comm, config);
  } catch (const chorus::error& failure) {
    std::fprintf(stderr, "chorus-perf: %s\n", failure.what());
    return 1;
  }
}
