// Reduction operators, element traits, errors, memory kinds, the
// environment parsers, the streaming copy and per-rank state.
#include <chorus/core/element_type.hpp>
#include <chorus/core/env.hpp>
#include <chorus/core/error.hpp>
#include <chorus/core/machine.hpp>
#include <chorus/core/memory_kind.hpp>
#include <chorus/core/rank_local.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/core/streaming_copy.hpp>
#include <chorus/core/variables.hpp>

#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

using namespace std::chrono_literals;

TEST_CASE("reduction operators combine like their definitions") {
  CHECK(chorus::op::sum{}(3, 4) == 7);
  CHECK(chorus::op::prod{}(3, 4) == 12);
  CHECK(chorus::op::min{}(3, -4) == -4);
  CHECK(chorus::op::max{}(3, -4) == 3);
  CHECK(chorus::op::avg{}(3.0, 4.0) == 7.0);
  CHECK(chorus::op::finalize(chorus::op::avg{}, 12.0, 4) == 3.0);
  CHECK(chorus::op::finalize(chorus::op::sum{}, 12.0, 4) == 12.0);
  CHECK(chorus::op::sum{}(std::int8_t{100}, std::int8_t{100}) == static_cast<std::int8_t>(-56));  // wraps
  CHECK(chorus::op::name_of<chorus::op::max>() == "max");
  auto user = [](int a, int b) { return a ^ b; };
  CHECK(chorus::op::name_of<decltype(user)>() == "user");
}

TEST_CASE("min and max propagate NaN from either side") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(std::isnan(chorus::op::max{}(nan, 1.0)));
  CHECK(std::isnan(chorus::op::max{}(1.0, nan)));
  CHECK(std::isnan(chorus::op::min{}(nan, 1.0)));
  CHECK(std::isnan(chorus::op::min{}(1.0, nan)));
  CHECK(chorus::op::max{}(-0.0, 2.0) == 2.0);
}

TEST_CASE("element traits") {
  CHECK(chorus::dtype_of<float> == chorus::dtype::float32);
  CHECK(chorus::dtype_of<chorus::half> == chorus::dtype::float16);
  CHECK(chorus::dtype_of<const std::int64_t> == chorus::dtype::int64);
  CHECK(chorus::size_of(chorus::dtype::bfloat16) == 2);
  CHECK(chorus::size_of(chorus::dtype::float64) == 8);
  CHECK(chorus::to_string(chorus::dtype::uint8) == "uint8");
  static_assert(std::is_same_v<chorus::accumulator_t<chorus::bfloat16>, float>);
  static_assert(std::is_same_v<chorus::accumulator_t<std::int32_t>, std::int32_t>);
  static_assert(chorus::element<double>);
  static_assert(!chorus::element<long double>);
}

TEST_CASE("errors carry category, rank, peer and operation") {
  const chorus::error failure(chorus::errc::timeout, "no message after 5 s", {2, 3, "recv"});
  CHECK(failure.category() == chorus::errc::timeout);
  CHECK(failure.rank() == 2);
  CHECK(failure.peer() == 3);
  CHECK(failure.operation() == "recv");
  CHECK(std::string(failure.what()) == "chorus timeout: rank 2, peer 3, in recv: no message after 5 s");
  const chorus::error bare(chorus::errc::invalid_argument, "bad");
  CHECK(std::string(bare.what()) == "chorus invalid_argument: bad");
  CHECK_THROWS_AS(chorus::require(false, "nope"), chorus::error);
}

TEST_CASE("memory kinds") {
  const chorus::memory_kinds host_only{chorus::memory_kind::host};
  CHECK(host_only.contains(chorus::memory_kind::host));
  CHECK_FALSE(host_only.contains(chorus::memory_kind::cuda_device));
  chorus::memory_kinds all = host_only;
  all.insert(chorus::memory_kind::cuda_device).insert(chorus::memory_kind::cuda_pinned);
  CHECK(all.contains(chorus::memory_kind::cuda_pinned));
  CHECK(chorus::to_string(chorus::memory_kind::cuda_device) == "cuda_device");
}

TEST_CASE("durations parse with units and reject garbage") {
  CHECK(chorus::env::parse_duration("30") == 30000ms);
  CHECK(chorus::env::parse_duration("30s") == 30000ms);
  CHECK(chorus::env::parse_duration("500ms") == 500ms);
  CHECK(chorus::env::parse_duration("1.5s") == 1500ms);
  CHECK(chorus::env::parse_duration("2m") == 120000ms);
  CHECK_FALSE(chorus::env::parse_duration("abc"));
  CHECK_FALSE(chorus::env::parse_duration("10 parsecs"));
  CHECK_FALSE(chorus::env::parse_duration(""));
  CHECK_FALSE(chorus::env::parse_duration("1..2s"));
}

TEST_CASE("environment variables: unset, valid and invalid") {
  ::unsetenv("CHORUS_TEST_VALUE");
  CHECK_FALSE(chorus::env::get_integer("CHORUS_TEST_VALUE", 0, 10));
  ::setenv("CHORUS_TEST_VALUE", "7", 1);
  CHECK(chorus::env::get_integer("CHORUS_TEST_VALUE", 0, 10) == 7);
  ::setenv("CHORUS_TEST_VALUE", "11", 1);
  CHECK_THROWS_WITH_AS(chorus::env::get_integer("CHORUS_TEST_VALUE", 0, 10),
                       "chorus invalid_argument: CHORUS_TEST_VALUE='11' is not an integer in [0, 10]", chorus::error);
  ::setenv("CHORUS_TEST_VALUE", "-0s", 1);
  CHECK_THROWS_AS(chorus::env::get_duration("CHORUS_TEST_VALUE"), chorus::error);
  ::setenv("CHORUS_TEST_VALUE", "yield", 1);
  CHECK(chorus::env::get_choice("CHORUS_TEST_VALUE", {"spin", "yield"}) == 1u);
  ::setenv("CHORUS_TEST_VALUE", "hop", 1);
  CHECK_THROWS_WITH_AS(chorus::env::get_choice("CHORUS_TEST_VALUE", {"spin", "yield"}),
                       "chorus invalid_argument: CHORUS_TEST_VALUE='hop' is not one of spin|yield", chorus::error);
  ::unsetenv("CHORUS_TEST_VALUE");
}

#include <chorus/comm/options.hpp>

TEST_CASE("settings: code wins over the environment, auto progress follows the core count") {
  using chorus::transport::progress_mode;
  ::unsetenv("CHORUS_PROGRESS");
  ::unsetenv("CHORUS_TIMEOUT");
  const int cores = chorus::usable_cores();
  CHECK(cores >= 1);
  CHECK(chorus::resolve({}, 1).progress == progress_mode::spin);
  CHECK(chorus::resolve({}, cores).progress == progress_mode::spin);
  CHECK(chorus::resolve({}, cores + 1).progress == progress_mode::block);  // oversubscribed
  CHECK(chorus::resolve({}, 1).timeout == chorus::default_timeout);

  ::setenv("CHORUS_PROGRESS", "yield", 1);
  ::setenv("CHORUS_TIMEOUT", "2m", 1);
  CHECK(chorus::resolve({}, cores + 1).progress == progress_mode::yield);
  CHECK(chorus::resolve({}, 1).timeout == 120000ms);
  chorus::options in_code;
  in_code.progress = progress_mode::spin;
  in_code.timeout = 5000ms;
  CHECK(chorus::resolve(in_code, cores + 1).progress == progress_mode::spin);
  CHECK(chorus::resolve(in_code, 1).timeout == 5000ms);

  ::setenv("CHORUS_PROGRESS", "auto", 1);
  CHECK(chorus::resolve({}, cores + 1).progress == progress_mode::block);
  ::setenv("CHORUS_PROGRESS", "busy", 1);
  CHECK_THROWS_AS(chorus::resolve({}, 1), chorus::error);
  ::unsetenv("CHORUS_PROGRESS");
  ::unsetenv("CHORUS_TIMEOUT");
}

namespace {

// Sets a variable for one test and removes it afterwards.
struct scoped_variable {
  const char* name;
  scoped_variable(const char* variable, const char* value) : name(variable) { ::setenv(name, value, 1); }
  ~scoped_variable() { ::unsetenv(name); }
};

}  // namespace

TEST_CASE("CHORUS_* variables: every value checked at once, misspelt names caught") {
  CHECK_NOTHROW(chorus::variables::check_variables());
  SUBCASE("a bad value of any known variable") {
    const std::pair<const char*, const char*> bad[] = {
        {"CHORUS_TIMEOUT", "soon"},
        {"CHORUS_PROGRESS", "fast"},
        {"CHORUS_DEBUG", "yes"},
        {"CHORUS_CHECK", "2"},
        {"CHORUS_ALLREDUCE_ALGO", "two words"},  // not a name (one allreduce lacks is found at its first call)
        {"CHORUS_CODEC_SIMD", "avx512"},
        {"CHORUS_FUSION_BUCKET", "0"},
        {"CHORUS_LOCAL_RANK", "-1"}};
    for (const auto& entry : bad) {
      const char* name = entry.first;  // not a structured binding: CAPTURE's lambda takes it (clang 14)
      const char* value = entry.second;
      scoped_variable set(name, value);
      CAPTURE(name);
      try {
        chorus::variables::check_variables();
        FAIL("accepted " << name << "=" << value);
      } catch (const chorus::error& failure) {
        CHECK(failure.category() == chorus::errc::invalid_argument);
        CHECK(std::string(failure.what()).find(name) != std::string::npos);
      }
    }
  }
  SUBCASE("a misspelt name says which variable it resembles") {
    scoped_variable set("CHORUS_TIMOUT", "5");
    CHECK_THROWS_WITH_AS(chorus::variables::check_variables(),
                         doctest::Contains("CHORUS_TIMOUT is not a chorus variable; did you mean CHORUS_TIMEOUT?"),
                         chorus::error);
  }
  SUBCASE("names unlike any chorus variable are someone else's") {
    scoped_variable set("CHORUS_BUILD_DIR", "/tmp/b");
    CHECK_NOTHROW(chorus::variables::check_variables());
  }
  SUBCASE("good values pass") {
    scoped_variable timeout("CHORUS_TIMEOUT", "2m"), algorithm("CHORUS_ALLREDUCE_ALGO", "rd");
    CHECK_NOTHROW(chorus::variables::check_variables());
    CHECK(chorus::variables::allreduce_algorithm() == chorus::algorithm("rd"));  // allreduce's list reads the alias
  }
}

TEST_CASE("edit distance") {
  CHECK(chorus::variables::edit_distance("CHORUS_TIMOUT", "CHORUS_TIMEOUT") == 1);
  CHECK(chorus::variables::edit_distance("", "abc") == 3);
  CHECK(chorus::variables::edit_distance("kitten", "sitting") == 3);
}

TEST_CASE("CHORUS_TUNE: rules by collective, rank count and size; every mistake named") {
  using chorus::algorithm;
  const chorus::tuning tune = chorus::parse_tuning(
      "allreduce:0-8K:rd,8K-2M:rabenseifner,2M-:ring;allgather@2:64K-:ring;reduce_scatter@3-5:1K-4K:recursive_halving;"
      ";");
  REQUIRE(tune.rules.size() == 5);
  // Parsing keeps the name as spelt; allreduce's list knows "rd" as recursive_doubling when it chooses.
  CHECK(tune.match("allreduce", 4, 0)->chosen == algorithm("rd"));
  CHECK(tune.match("allreduce", 4, 8191)->chosen == algorithm("rd"));
  CHECK(tune.match("allreduce", 4, 8192)->chosen == algorithm::rabenseifner);
  CHECK(tune.match("allreduce", 1000, std::size_t{1} << 40)->chosen == algorithm::ring);
  CHECK(tune.match("allreduce", 4, 8192)->text == "CHORUS_TUNE allreduce:8K-2M:rabenseifner");
  CHECK(tune.match("allgather", 2, 64u << 10)->chosen == algorithm::ring);
  CHECK(tune.match("allgather", 2, (64u << 10) - 1) == nullptr);
  CHECK(tune.match("allgather", 3, 64u << 10) == nullptr);
  CHECK(tune.match("reduce_scatter", 5, 1024)->text == "CHORUS_TUNE reduce_scatter@3-5:1K-4K:recursive_halving");
  CHECK(tune.match("reduce_scatter", 6, 1024) == nullptr);
  CHECK(tune.match("reduce_scatter", 2, 1024) == nullptr);
  CHECK(tune.match("broadcast", 2, 1) == nullptr);
  CHECK(chorus::parse_tuning("").rules.empty());
  CHECK(chorus::parse_tuning("broadcast@4-:256K-:chain").match("broadcast", 1 << 20, 1u << 20) != nullptr);

  const std::pair<const char*, const char*> bad[] = {
      {"allreduce", "no ':' after the collective"},
      {"allreduc:0-:ring", "'allreduc' is not a collective (allreduce, allgather"},
      {"allreduce:0-:Fastest!", "'Fastest!' is not an algorithm's name"},
      {"broadcast:0-:auto", "a rule names an algorithm, not auto"},
      {"allreduce:8K:ring", "rule '8K:ring' is not low-high:algorithm"},
      {"allreduce:x-:ring", "'x' is not a size"},
      {"allreduce:8K-4K:ring", "'4K' is not a size above the low end"},
      {"allreduce@0:0-:ring", "ranks must be N, N-M or N-"},
      {"allreduce@5-3:0-:ring", "ranks N-M need N <= M"},
      {"allreduce:0-:ring,", "rule '' is not low-high:algorithm"},
  };
  for (const auto& [text, message] : bad) {
    const std::string spelled = text;  // not the structured binding: CAPTURE's lambda takes it (clang 14)
    CAPTURE(spelled);
    CHECK_THROWS_WITH_AS(chorus::parse_tuning(spelled), doctest::Contains(message), chorus::error);
  }
  scoped_variable set("CHORUS_TUNE", "allgather:0-:Tree");
  CHECK_THROWS_WITH_AS(chorus::variables::check_variables(), doctest::Contains("CHORUS_TUNE: 'allgather:0-:Tree'"),
                       chorus::error);
}

namespace {
constexpr std::string_view compile_time_rules = "allreduce@3-:0-16K:rd,16K-:ring;broadcast:0-:tree";
}

// The collectives' defaults parse at compile time through the same parser
// (a malformed default would not compile); the rules match as parsed at run time.
TEST_CASE("CHORUS_TUNE rules parse at compile time as at run time") {
  constexpr auto specs = chorus::parse_tuning_at_compile_time<compile_time_rules>();
  static_assert(specs.size() == 3);
  static_assert(specs[0].min_ranks == 3 && specs[0].max_bytes == 16384 && specs[0].chosen == chorus::algorithm("rd"));
  static_assert(specs[1].min_bytes == 16384 && specs[1].body == "16K-:ring" && specs[1].head == "allreduce@3-");
  static_assert(specs[2].collective == "broadcast" && specs[2].matches("broadcast", 1, 1u << 30));
  const chorus::tuning at_run_time = chorus::parse_tuning(compile_time_rules, "default");
  const chorus::tuning from_specs = chorus::tuning_of(specs, "default");
  REQUIRE(at_run_time.rules.size() == from_specs.rules.size());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    CHECK(at_run_time.rules[i].text == from_specs.rules[i].text);
    CHECK(at_run_time.rules[i].chosen == from_specs.rules[i].chosen);
    CHECK(at_run_time.rules[i].min_bytes == from_specs.rules[i].min_bytes);
  }
  CHECK(from_specs.rules[1].text == "default allreduce@3-:16K-:ring");
  static_assert(chorus::env::parse_integer("-42") == -42 && !chorus::env::parse_integer("+1") &&
                !chorus::env::parse_integer("") && !chorus::env::parse_integer("-") &&
                !chorus::env::parse_integer("99999999999999999999") && chorus::env::parse_size("64K") == 65536u);
}

TEST_CASE("integer sums and products wrap on overflow (two's complement), never undefined") {
  constexpr std::int32_t big = std::numeric_limits<std::int32_t>::max();
  CHECK(chorus::op::sum{}(big, std::int32_t{1}) == std::numeric_limits<std::int32_t>::min());
  CHECK(chorus::op::prod{}(std::int32_t{-77700}, std::int32_t{-3754080}) ==
        static_cast<std::int32_t>(static_cast<std::uint32_t>(-77700) * static_cast<std::uint32_t>(-3754080)));
  CHECK(chorus::op::prod{}(std::int64_t{1} << 62, std::int64_t{4}) == 0);
  CHECK(chorus::op::prod{}(std::uint16_t{65535}, std::uint16_t{65535}) == 1);  // not promoted to int
  CHECK(chorus::op::sum{}(std::int8_t{127}, std::int8_t{1}) == -128);
  CHECK(chorus::op::sum{}(1.5f, 2.25f) == 3.75f);
}

// Every alignment of source and target (the streamed middle starts at a
// 16-byte boundary of the target), lengths around the 16-byte stores and
// the 64-byte blocks: the bytes equal memcpy's, none outside the target
// is touched.
TEST_CASE("streaming_copy: memcpy's bytes at every alignment and length, nothing past the target") {
  std::vector<unsigned char> source(4096 + 64), target(4096 + 128);
  for (std::size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>(i * 131 + 7);
  std::size_t wrong = 0;
  for (std::size_t from = 0; from < 16; from += 3)
    for (std::size_t to = 0; to < 16; ++to)
      for (const std::size_t bytes : {0, 1, 15, 16, 17, 48, 63, 64, 65, 127, 128, 129, 200, 1000, 4095}) {
        std::fill(target.begin(), target.end(), 0xEE);
        chorus::streaming_copy(std::span<const unsigned char>(source.data() + from, bytes),
                               std::span<unsigned char>(target.data() + 32 + to, bytes));
        chorus::streaming_fence();
        wrong += std::memcmp(target.data() + 32 + to, source.data() + from, bytes) != 0;
        for (std::size_t i = 0; i < target.size(); ++i)
          if (i < 32 + to || i >= 32 + to + bytes) wrong += target[i] != 0xEE;
      }
  CHECK(wrong == 0);

  // Elements wider than a byte, at an offset that is not 16-aligned.
  std::vector<double> values(1001), copied(1003, -1.0);
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = 0.5 * double(i) - 3.0;
  chorus::streaming_copy(std::span<const double>(values), std::span<double>(copied).subspan(1, values.size()));
  chorus::streaming_fence();
  CHECK(std::vector<double>(copied.begin() + 1, copied.end() - 1) == values);
  CHECK(copied.front() == -1.0);
  CHECK(copied.back() == -1.0);
}

TEST_CASE("streaming stores pay where the footprint fills the last-level cache, unless CHORUS_STREAMING_STORES says") {
  const std::size_t cache = chorus::last_level_cache_bytes();
  CHECK(cache >= (std::size_t{256} << 10));
  if (std::getenv("CHORUS_STREAMING_STORES") != nullptr) return;  // read once per process: auto is the case here
  CHECK_FALSE(chorus::streaming_pays(cache - 1));
  CHECK(chorus::streaming_pays(cache) == bool(CHORUS_STREAMING_STORES));
}

namespace {
struct first_tag;
struct second_tag;
chorus::rank_state* running = nullptr;  // the "rank" a test source says runs now
chorus::rank_state* running_state() noexcept { return running; }
}  // namespace

TEST_CASE("rank_local: one value per thread and tag by default, one per rank under a source") {
  int& first = chorus::rank_local<int, first_tag>();
  first = 7;
  CHECK(&chorus::rank_local<int, first_tag>() == &first);  // kept across calls
  CHECK(chorus::rank_local<int, second_tag>() == 0);       // another tag, another value
  int seen_on_other_thread = -1;
  std::thread([&] { seen_on_other_thread = chorus::rank_local<int, first_tag>(); }).join();
  CHECK(seen_on_other_thread == 0);  // value-initialised, not this thread's 7

  // Two simulated ranks on this one thread, switched as a scheduler would.
  chorus::rank_state a, b;
  const chorus::rank_state_source previous = chorus::install_rank_state_source(&running_state);
  running = &a;
  chorus::rank_local<int, first_tag>() = 1;
  const chorus::error failure_a(chorus::errc::timeout, "a waited too long");
  running = &b;
  CHECK(chorus::rank_local<int, first_tag>() == 0);
  chorus::rank_local<int, first_tag>() = 2;
  const chorus::error failure_b(chorus::errc::mismatch, "b got too much");
  running = &a;
  CHECK(chorus::rank_local<int, first_tag>() == 1);
  CHECK(chorus::detail::latest_error() == failure_a.what());  // each rank's last error is its own
  running = &b;
  CHECK(chorus::detail::latest_error() == failure_b.what());
  running = nullptr;  // not a rank: the thread's own
  CHECK(chorus::rank_local<int, first_tag>() == 7);
  const bool ours_replaced = chorus::install_rank_state_source(previous) == &running_state;
  CHECK(ours_replaced);
  CHECK(&chorus::rank_local<int, first_tag>() == &first);
}

TEST_CASE("machine file: what text() writes parses back; a name left out keeps its default; every mistake named") {
  chorus::machine_model measured;
  measured.within_host = {2.5e-6, 1.25e-10};
  measured.between_hosts = {4.75e-5, 8.5e-9};
  measured.gamma = 1.5e-10;
  measured.memory_beta = 9.5e-11;
  measured.flag = 6.25e-7;
  const chorus::machine_model back = chorus::machine_model::parse(measured.text(), "test");
  CHECK(back.within_host.alpha == doctest::Approx(2.5e-6).epsilon(1e-5));
  CHECK(back.within_host.beta == doctest::Approx(1.25e-10).epsilon(1e-5));
  CHECK(back.between_hosts.alpha == doctest::Approx(4.75e-5).epsilon(1e-5));
  CHECK(back.between_hosts.beta == doctest::Approx(8.5e-9).epsilon(1e-5));
  CHECK(back.gamma == doctest::Approx(1.5e-10).epsilon(1e-5));
  CHECK(back.memory_beta == doctest::Approx(9.5e-11).epsilon(1e-5));
  CHECK(back.flag == doctest::Approx(6.25e-7).epsilon(1e-5));
  // Each path's constants are what an algorithm's formula sees on it.
  CHECK(back.on_path(true).alpha == back.between_hosts.alpha);
  CHECK(back.on_path(false).beta == back.within_host.beta);
  CHECK(back.on_path(true).flag == back.flag);

  const chorus::machine_model partial =
      chorus::machine_model::parse("# a comment\n\n  gamma = 2e-10  # reduced\n", "t");
  CHECK(partial.gamma == 2e-10);
  CHECK(partial.within_host.alpha == chorus::machine{}.alpha);
  CHECK(partial.between_hosts.beta == chorus::machine{}.beta);
  CHECK(partial.flag == chorus::machine{}.flag);

  for (const auto& [text, message] : std::initializer_list<std::pair<const char*, const char*>>{
           {"gamma 2e-10", "t line 1: expected `name = value`"},
           {"\ngama = 2e-10", "t line 2: unknown name `gama`"},
           {"flag = fast", "t line 1: flag: `fast` is not a number of seconds above zero"},
           {"flag = -1e-6", "is not a number of seconds above zero"},
           {"flag = 0", "is not a number of seconds above zero"},
           {"flag = 1e-6s", "is not a number of seconds above zero"},
           {"flag = inf", "is not a number of seconds above zero"},
           {"flag =", "is not a number of seconds above zero"}}) {
    CAPTURE(text);
    CHECK_THROWS_WITH_AS(chorus::machine_model::parse(text, "t"), doctest::Contains(message), chorus::error);
  }
}

TEST_CASE("fit_path: least squares through a path's times recovers its alpha and beta") {
  const std::vector<double> bytes = {8, 32, 128, 512, 2048, 8192};
  std::vector<double> seconds;
  for (double b : bytes) seconds.push_back(3e-6 + b * 2e-10);
  const chorus::path_cost exact = chorus::fit_path(bytes, seconds);
  CHECK(exact.alpha == doctest::Approx(3e-6).epsilon(1e-9));
  CHECK(exact.beta == doctest::Approx(2e-10).epsilon(1e-9));
  // Noise that cancels in pairs leaves the slope, and a negative intercept
  // (noise at small sizes) is clamped to zero.
  std::vector<double> noisy = seconds;
  for (std::size_t k = 0; k < noisy.size(); ++k) noisy[k] += (k % 2 == 0 ? 1 : -1) * 1e-7;
  CHECK(chorus::fit_path(bytes, noisy).beta == doctest::Approx(2e-10).epsilon(0.05));
  const std::vector<double> steep = {1e-9, 2e-6};  // through (8, 1 ns) and (32, 2 us): below zero at 0
  CHECK(chorus::fit_path(std::vector<double>{8, 32}, steep).alpha == 0.0);
  CHECK_THROWS_AS(chorus::fit_path(std::vector<double>{8}, std::vector<double>{1e-6}), chorus::error);
  CHECK_THROWS_AS(chorus::fit_path(std::vector<double>{8, 8}, std::vector<double>{1e-6, 2e-6}), chorus::error);
}
