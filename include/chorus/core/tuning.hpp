// CHORUS_TUNE: one string of rules that overrides the measured tables, for
// any collective, by rank count and size. Parsed once per communicator
// (init() rejects a bad one); the registry (collective/machinery/selection.hpp)
// consults it on every call and reports the rule that chose.
//
//   CHORUS_TUNE="allreduce:0-8K:rd,8K-2M:rabenseifner,2M-:ring;allgather@2:64K-:ring"
//
//   tune  := entry (';' entry)*
//   entry := collective ['@' ranks] ':' rule (',' rule)*
//   rule  := bytes '-' [bytes] ':' algorithm   the sizes [low, high); no high: no limit
//   ranks := N | N '-' [M]                     inclusive; no M: no limit
//   bytes := an integer with an optional K, M or G (binary multiples)
//
// Sizes are what the collective moves: allreduce and broadcast the buffer,
// allgather, reduce_scatter, alltoall, gather and scatter all n blocks,
// reduce the buffer, compressed_allreduce the
// encoded tensor. The first rule that matches wins; where none matches the
// collective's defaults decide, which are rules in this same grammar
// (collective/machinery/selection.hpp). bench/sweep prints a tuning string it
// measured. Parsing checks the form and the collective's name; whether the
// collective offers the algorithm a rule names is checked against its list
// when it chooses (collective/machinery/selection.hpp), on every rank alike.
#pragma once

#include <chorus/core/algorithm.hpp>
#include <chorus/core/env.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>
#include <array>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus {

// The collectives that choose among algorithms (each has a list,
// collective/machinery/algorithm_list.hpp): a rule must name one of them.
inline constexpr std::array<std::string_view, 9> selecting_collectives{
    "allreduce", "allgather", "reduce_scatter", "broadcast", "compressed_allreduce",
    "reduce",    "alltoall",  "gather",         "scatter"};

// A rule as parsed: where it applies and what it names, with its text as
// views into what was parsed ("allreduce@3-" and "8K-2M:rabenseifner").
struct rule_spec {
  std::string_view collective;  // one of selecting_collectives (static storage)
  int min_ranks = 1, max_ranks = INT_MAX;
  std::size_t min_bytes = 0, max_bytes = SIZE_MAX;
  algorithm chosen = algorithm::automatic;
  std::string_view head, body;

  constexpr bool matches(std::string_view name, int ranks, std::size_t bytes) const noexcept {
    return name == collective && ranks >= min_ranks && ranks <= max_ranks && bytes >= min_bytes && bytes < max_bytes;
  }
};

// A rule as a communicator keeps it, its text owned, as reported:
// "CHORUS_TUNE allreduce@3-:8K-2M:rabenseifner" (the views are dropped).
struct tuning_rule : rule_spec {
  std::string text;

  tuning_rule(const rule_spec& spec, std::string_view source)
      : rule_spec(spec), text(std::string(source) + " " + std::string(spec.head) + ":" + std::string(spec.body)) {
    head = body = {};
  }
};

struct tuning {
  std::vector<tuning_rule> rules;

  // The first rule for this call whose algorithm `usable` accepts.
  template <class Usable>
  const tuning_rule* match(std::string_view collective, int ranks, std::size_t bytes, const Usable& usable) const {
    for (std::size_t i = 0; i < rules.size(); ++i)  // indices: no iterator instantiations (compile time)
      if (rules[i].matches(collective, ranks, bytes) && usable(rules[i].chosen)) return &rules[i];
    return nullptr;
  }
  const tuning_rule* match(std::string_view collective, int ranks, std::size_t bytes) const {
    return match(collective, ranks, bytes, [](const algorithm&) { return true; });
  }
};

namespace detail {

constexpr std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  for (std::size_t start = 0;;) {
    const std::size_t end = text.find(separator, start);
    parts.push_back(text.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

// constexpr: the collectives' defaults parse at compile time (a bad one
// does not compile, and no file that calls a collective compiles the
// parser); CHORUS_TUNE and options.tune parse at run time.
class tuning_parser {
 public:
  constexpr tuning_parser(std::string_view text, std::string_view source) : text_(text), source_(source) {}

  constexpr std::vector<rule_spec> parse() const {
    std::vector<rule_spec> result;
    for (std::string_view entry : split(text_, ';')) {
      if (entry.empty()) continue;  // "a;b;" and an empty string are fine
      parse_entry(entry, result);
    }
    return result;
  }

 private:
  [[noreturn]] void fail(std::string_view where, const std::string& why) const {
    throw error(errc::invalid_argument, std::string(source_) + ": '" + std::string(where) + "': " + why +
                                            " (form: allreduce:0-8K:rd,8K-:ring;allgather@2-4:64K-:ring)");
  }

  constexpr void parse_entry(std::string_view entry, std::vector<rule_spec>& result) const {
    const std::size_t colon = entry.find(':');
    if (colon == std::string_view::npos) fail(entry, "no ':' after the collective");
    std::string_view name = entry.substr(0, colon);
    int min_ranks = 1, max_ranks = INT_MAX;
    if (const std::size_t at = name.find('@'); at != std::string_view::npos) {
      parse_ranks(name.substr(at + 1), entry, min_ranks, max_ranks);
      name = name.substr(0, at);
    }
    const auto known = std::find(selecting_collectives.begin(), selecting_collectives.end(), name);
    if (known == selecting_collectives.end()) {
      std::string names;
      for (std::string_view each : selecting_collectives) names += (names.empty() ? "" : ", ") + std::string(each);
      fail(entry, "'" + std::string(name) + "' is not a collective (" + names + ")");
    }
    for (std::string_view rule : split(entry.substr(colon + 1), ',')) {
      rule_spec parsed;
      parsed.collective = *known;
      parsed.min_ranks = min_ranks;
      parsed.max_ranks = max_ranks;
      parsed.head = entry.substr(0, colon);
      parsed.body = rule;
      parse_rule(rule, entry, parsed);
      result.push_back(parsed);
    }
  }

  constexpr void parse_ranks(std::string_view text, std::string_view entry, int& low, int& high) const {
    const std::size_t dash = text.find('-');
    const auto low_value = env::parse_integer(text.substr(0, dash));
    if (!low_value || *low_value < 1 || *low_value > INT_MAX) fail(entry, "ranks must be N, N-M or N- with N >= 1");
    low = static_cast<int>(*low_value);
    high = low;
    if (dash == std::string_view::npos) return;
    const std::string_view rest = text.substr(dash + 1);
    if (rest.empty()) {
      high = INT_MAX;
      return;
    }
    const auto high_value = env::parse_integer(rest);
    if (!high_value || *high_value < low || *high_value > INT_MAX) fail(entry, "ranks N-M need N <= M");
    high = static_cast<int>(*high_value);
  }

  constexpr void parse_rule(std::string_view rule, std::string_view entry, rule_spec& parsed) const {
    const std::size_t colon = rule.find(':'), dash = rule.find('-');
    if (colon == std::string_view::npos || dash == std::string_view::npos || dash > colon)
      fail(entry, "rule '" + std::string(rule) + "' is not low-high:algorithm");
    const auto low = env::parse_size(rule.substr(0, dash));
    if (!low) fail(entry, "'" + std::string(rule.substr(0, dash)) + "' is not a size (4096, 64K, 2M)");
    parsed.min_bytes = *low;
    const std::string_view high_text = rule.substr(dash + 1, colon - dash - 1);
    if (!high_text.empty()) {
      const auto high = env::parse_size(high_text);
      if (!high || *high <= *low) fail(entry, "'" + std::string(high_text) + "' is not a size above the low end");
      parsed.max_bytes = *high;
    }
    const std::string_view name = rule.substr(colon + 1);
    if (!is_algorithm_name(name)) fail(entry, "'" + std::string(name) + "' is not an algorithm's name");
    parsed.chosen = algorithm(name);
    if (parsed.chosen.is_automatic()) fail(entry, "a rule names an algorithm, not auto");
  }

  std::string_view text_, source_;
};

}  // namespace detail

// Rules parsed at compile time: `Text` (a static constexpr string_view, as
// a collective's defaults are) as an array of rule_spec.
template <const std::string_view& Text>
consteval auto parse_tuning_at_compile_time() {
  constexpr std::size_t count = detail::tuning_parser(Text, "default").parse().size();
  std::array<rule_spec, count> rules{};
  const std::vector<rule_spec> parsed = detail::tuning_parser(Text, "default").parse();
  for (std::size_t i = 0; i < count; ++i) rules[i] = parsed[i];
  return rules;
}

// Rules from parsed specs, owning their text; `source` begins each.
inline tuning tuning_of(std::span<const rule_spec> specs, std::string_view source) {
  tuning result;
  result.rules.reserve(specs.size());
  for (const rule_spec& spec : specs) result.rules.emplace_back(spec, source);
  return result;
}

inline tuning parse_tuning(std::string_view text, std::string_view source = "CHORUS_TUNE") {
  return tuning_of(detail::tuning_parser(text, source).parse(), source);
}

// CHORUS_TUNE from the environment; no rules when unset.
inline tuning tuning_from_environment() {
  const auto text = env::get("CHORUS_TUNE");
  return text ? parse_tuning(*text) : tuning{};
}

}  // namespace chorus
