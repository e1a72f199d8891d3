// The benchmark harness behind chorus-perf and the peer benchmarks
// (bench/peers): the size sweep, the timing across ranks, the #wrong count,
// and one printer for the table and the JSON, so every tool's rows line up
// column for column:
//
//   size(B) count type op algo | time(us) min-max(us) algbw busbw #wrong | ...
//
// one group of five columns per form (out-of-place, in-place) a tool prints.
// time is the mean over ranks of each rank's mean time per iteration, with
// the fastest and slowest rank's; algbw = size / time (GB/s, 10^9); busbw =
// algbw * the collective's bus factor (nccl-tests' units). #wrong counts
// elements of one checked call, after the timed ones, that differ from the
// expected result. A closing line gives the average busbw of the first form.
//
// The harness knows nothing of chorus: a library gives it a `world` (rank,
// size, barrier, reductions of the timings) and, per size, a case that fills,
// runs and checks one collective. perf/collective.hpp describes chorus's
// collectives that way; bench/peers/peer_sweep.hpp Open MPI's and Gloo's.
#pragma once

#include <chorus/core/env.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace perf {

enum class form { out_of_place, in_place };

constexpr std::string_view form_name(form f) noexcept { return f == form::in_place ? "in-place" : "out-of-place"; }
constexpr std::string_view json_name(form f) noexcept { return f == form::in_place ? "in_place" : "out_of_place"; }

// A bad command line: the tool prints its usage with this message.
class usage_error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What every tool's command line shares: the sizes, the repetitions, the
// check and the JSON file.
struct sweep_settings {
  std::size_t min_bytes = 8, max_bytes = 64u << 20, factor = 2;
  int iterations = 20, warmup = 5;
  // At least this many bytes per measurement (--auto-iters; 0: exactly
  // -n). By default 64 MiB: 20 calls of a few microseconds would weigh
  // the ranks' skew leaving the barrier as much as the calls. -n alone
  // means exactly ITERS, as in nccl-tests.
  std::size_t auto_bytes = 64u << 20;
  bool auto_given = false;
  bool check = true;
  std::string json;
};

inline std::size_t size_argument(std::string_view text) {
  const auto value = chorus::env::parse_size(text);
  if (!value) throw usage_error("bad size '" + std::string(text) + "'");
  return *value;
}

inline int count_argument(std::string_view text) {
  const auto value = chorus::env::parse_integer(text);
  if (!value || *value < 0 || *value > 1000000) throw usage_error("bad number '" + std::string(text) + "'");
  return static_cast<int>(*value);
}

// Takes `flag value` if it is one of the shared options; false if it is not.
inline bool take_sweep_flag(sweep_settings& s, std::string_view flag, std::string_view value) {
  if (flag == "-b")
    s.min_bytes = size_argument(value);
  else if (flag == "-e")
    s.max_bytes = size_argument(value);
  else if (flag == "-f")
    s.factor = size_argument(value);
  else if (flag == "-n") {
    s.iterations = std::max(1, count_argument(value));
    if (!s.auto_given) s.auto_bytes = 0;
  } else if (flag == "-w")
    s.warmup = count_argument(value);
  else if (flag == "-c")
    s.check = count_argument(value) != 0;
  else if (flag == "--json")
    s.json = value;
  else if (flag == "--auto-iters") {
    s.auto_bytes = size_argument(value);
    s.auto_given = true;
  } else
    return false;
  return true;
}

inline constexpr std::string_view sweep_usage =
    "[-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-c 0|1] [--json FILE] [--auto-iters BYTES]";

inline void validate(const sweep_settings& s) {
  if (s.factor < 2) throw usage_error("-f must be at least 2");
  if (s.min_bytes == 0 || s.min_bytes > s.max_bytes) throw usage_error("need 0 < -b <= -e");
}

// MIN, MIN*FACTOR, ... up to MAX, stopping before an overflow.
inline std::vector<std::size_t> sizes(const sweep_settings& s) {
  std::vector<std::size_t> all;
  for (std::size_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= s.factor) {
    all.push_back(bytes);
    if (bytes > s.max_bytes / s.factor) break;
  }
  return all;
}

// Small messages take microseconds: they repeat until auto_bytes have
// moved (at most 2000 times, at least -n), so one hiccup does not dominate.
inline int iterations_for(const sweep_settings& s, std::size_t bytes) {
  if (s.auto_bytes == 0) return s.iterations;
  const std::size_t wanted = s.auto_bytes / std::max<std::size_t>(1, bytes);
  return static_cast<int>(std::clamp<std::size_t>(wanted, static_cast<std::size_t>(s.iterations), 2000));
}

// The ranks a benchmark runs on, as far as the harness needs them.
class world {
 public:
  virtual ~world() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void barrier() = 0;
  // Over all ranks: the sum, the minimum and the maximum of one value each.
  virtual void sum_min_max(double& sum, double& low, double& high) = 0;
  virtual void sum(std::uint64_t& count) = 0;
};

struct measurement {
  double mean_us = 0, min_us = 0, max_us = 0;
  std::uint64_t wrong = 0;

  double algbw(std::size_t bytes) const { return static_cast<double>(bytes) / (mean_us * 1e-6) / 1e9; }
};

// One collective, sized in turn for each size of the sweep, as a library
// runs it. The harness calls it through this interface, so that the sweep,
// the timing and the printing are compiled once, not once per collective,
// element type and operator.
class benchmark_case {
 public:
  virtual ~benchmark_case() = default;
  virtual void resize(std::size_t bytes) = 0;     // buffers for a size of about `bytes`
  virtual std::size_t bytes() const = 0;          // nccl-tests' size, as resized
  virtual std::size_t count() const = 0;          // nccl-tests' count
  virtual bool has(form f) const = 0;             // absent forms print n/a
  virtual void fill() = 0;                        // the inputs of a checked run, outputs cleared
  virtual void run(form f) = 0;                   // one call
  virtual std::uint64_t wrong(form f) const = 0;  // elements of the result that differ from expected
  virtual std::string algorithm() const = 0;      // what the last run used, for the algo column
};

inline measurement measure(world& ranks, const sweep_settings& s, benchmark_case& bench, form f) {
  bench.fill();
  for (int i = 0; i < s.warmup; ++i) bench.run(f);
  const int iterations = iterations_for(s, bench.bytes());
  ranks.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) bench.run(f);
  double sum = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
  double low = sum, high = sum;
  ranks.sum_min_max(sum, low, high);
  measurement result{sum / ranks.size() * 1e6, low * 1e6, high * 1e6, 0};
  if (s.check) {
    bench.fill();
    bench.run(f);
    std::uint64_t wrong = bench.wrong(f);
    ranks.sum(wrong);
    result.wrong = wrong;
  }
  return result;
}

// What a table says of itself; the rows say the rest.
struct table {
  std::string title;       // the first line, after "# "
  std::string collective;  // for the JSON
  std::string type, op;    // the type and op columns ("-" where no op applies)
  double bus_factor = 1;
  std::vector<form> forms{form::out_of_place, form::in_place};
};

struct row {
  std::size_t bytes = 0, count = 0;
  std::string algorithm;
  std::vector<std::optional<measurement>> results;  // per form of the table; empty where the case lacks it
};

// The one printer: table lines on stdout, rows as JSON objects.
class printer {
 public:
  printer(table t, int ranks) : table_(std::move(t)), ranks_(ranks) {}

  void header() const {
    std::printf("# %s\n", table_.title.c_str());
    std::printf("#%11s %10s %9s %6s %19s", "", "", "", "", "");
    for (const form f : table_.forms) std::printf("   %-39s", std::string(form_name(f)).c_str());
    std::printf("\n#%11s %10s %9s %6s %19s", "size(B)", "count", "type", "op", "algo");
    for (std::size_t i = 0; i < table_.forms.size(); ++i)
      std::printf(" %9s %17s %7s %7s %6s", "time(us)", "min-max(us)", "algbw", "busbw", "#wrong");
    std::printf("\n");
  }

  void print(const row& r) {
    std::printf(" %11zu %10zu %9s %6s %19s", r.bytes, r.count, table_.type.c_str(), table_.op.c_str(),
                r.algorithm.c_str());
    for (const auto& result : r.results) std::printf(" %s", cells(result, r.bytes).c_str());
    std::printf("\n");
    std::fflush(stdout);
    if (r.results.front()) {
      busbw_total_ += r.results.front()->algbw(r.bytes) * table_.bus_factor;
      ++rows_with_busbw_;
    }
    for (const auto& result : r.results) wrong_ += result ? result->wrong : 0;
    json_rows_.push_back(json(r));
  }

  void summary() const {
    std::printf("# Out of bounds values : %llu %s\n# Avg bus bandwidth    : %.3f GB/s\n",
                static_cast<unsigned long long>(wrong_), wrong_ ? "FAILED" : "OK",
                rows_with_busbw_ ? busbw_total_ / rows_with_busbw_ : 0.0);
  }

  // Writes the rows as a JSON array; false if the file cannot be written.
  bool write_json(const std::string& path) const {
    std::ofstream file(path);
    file << "[\n";
    for (std::size_t i = 0; i < json_rows_.size(); ++i)
      file << "  " << json_rows_[i] << (i + 1 < json_rows_.size() ? ",\n" : "\n");
    file << "]\n";
    return static_cast<bool>(file);
  }

  std::uint64_t wrong() const noexcept { return wrong_; }

 private:
  std::string cells(const std::optional<measurement>& m, std::size_t bytes) const {
    char text[128];
    if (!m) {
      std::snprintf(text, sizeof text, "%9s %17s %7s %7s %6s", "n/a", "", "", "", "");
      return text;
    }
    char range[40];
    std::snprintf(range, sizeof range, "%.1f-%.1f", m->min_us, m->max_us);
    const double algbw = m->algbw(bytes);
    std::snprintf(text, sizeof text, "%9.1f %17s %7.2f %7.2f %6llu", m->mean_us, range, algbw,
                  algbw * table_.bus_factor, static_cast<unsigned long long>(m->wrong));
    return text;
  }

  std::string json(const row& r) const {
    std::ostringstream out;
    out << "{\"collective\": \"" << table_.collective << "\", \"ranks\": " << ranks_ << ", \"size\": " << r.bytes
        << ", \"count\": " << r.count << ", \"type\": \"" << table_.type << "\", \"op\": \"" << table_.op
        << "\", \"algo\": \"" << r.algorithm << "\"";
    for (std::size_t i = 0; i < r.results.size(); ++i) {
      if (!r.results[i]) continue;
      const measurement& m = *r.results[i];
      const double algbw = m.algbw(r.bytes);
      out << ", \"" << json_name(table_.forms[i]) << "\": {\"time_us\": " << m.mean_us << ", \"min_us\": " << m.min_us
          << ", \"max_us\": " << m.max_us << ", \"algbw_gbps\": " << algbw
          << ", \"busbw_gbps\": " << algbw * table_.bus_factor << ", \"wrong\": " << m.wrong << "}";
    }
    out << "}";
    return out.str();
  }

  table table_;
  int ranks_;
  double busbw_total_ = 0;
  int rows_with_busbw_ = 0;
  std::uint64_t wrong_ = 0;
  std::vector<std::string> json_rows_;
};

// Times every size of the sweep in every form of the table. Rank 0 prints.
// Returns the exit status: 0 when no element was wrong.
inline int sweep(world& ranks, const sweep_settings& s, table t, benchmark_case& bench) {
  const std::vector<form> forms = t.forms;
  printer out(std::move(t), ranks.size());
  const bool speaks = ranks.rank() == 0;
  if (speaks) out.header();
  const std::vector<std::size_t> all = sizes(s);
  std::uint64_t wrong = 0;
  for (std::size_t done = 0; done < all.size(); ++done) {
    bench.resize(all[done]);
    row r{bench.bytes(), bench.count(), "", {}};
    for (const form f : forms) {
      if (!bench.has(f)) {
        r.results.emplace_back();
        continue;
      }
      r.results.push_back(measure(ranks, s, bench, f));
      wrong += r.results.back()->wrong;
    }
    r.algorithm = bench.algorithm();
    if (!speaks) continue;
    out.print(r);
    if (all.size() > 8) std::fprintf(stderr, "perf: %zu/%zu sizes done\n", done + 1, all.size());
  }
  if (speaks) {
    out.summary();
    if (!s.json.empty() && !out.write_json(s.json)) std::fprintf(stderr, "perf: cannot write %s\n", s.json.c_str());
  }
  return wrong == 0 ? 0 : 1;
}

}  // namespace perf
