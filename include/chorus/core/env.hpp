// Reading CHORUS_* (and launcher) environment variables with clear errors.
//
// An unset or empty variable is "not given" (std::nullopt); a set variable
// that does not parse is an invalid_argument error naming the variable, the
// value and what was expected, never a silent default.
#pragma once

#include <chorus/core/error.hpp>

#include <cctype>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace chorus::env {

inline std::optional<std::string> get(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

// A decimal integer with an optional '-', nothing else; constexpr, so that
// the collectives' default rules parse at compile time (core/tuning.hpp).
constexpr std::optional<long long> parse_integer(std::string_view text) {
  const bool negative = !text.empty() && text.front() == '-';
  if (negative) text.remove_prefix(1);
  if (text.empty()) return std::nullopt;
  constexpr long long most = std::numeric_limits<long long>::max();
  long long value = 0;
  for (const char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    const int digit = c - '0';
    if (value > (most - digit) / 10) return std::nullopt;  // overflow
    value = value * 10 + digit;
  }
  return negative ? -value : value;
}

inline std::optional<long long> get_integer(const char* name, long long min_value, long long max_value) {
  const auto text = get(name);
  if (!text) return std::nullopt;
  const auto value = parse_integer(*text);
  if (!value || *value < min_value || *value > max_value)
    throw error(errc::invalid_argument, std::string(name) + "='" + *text + "' is not an integer in [" +
                                            std::to_string(min_value) + ", " + std::to_string(max_value) + "]");
  return value;
}

// "30" and "30s" are seconds; "500ms", "2m", "1.5s" and "1h" work too.
inline std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  std::size_t number_end = 0;
  while (number_end < text.size() &&
         (std::isdigit(static_cast<unsigned char>(text[number_end])) || text[number_end] == '.'))
    ++number_end;
  if (number_end == 0) return std::nullopt;
  const std::string number(text.substr(0, number_end));
  char* parse_end = nullptr;
  const double amount = std::strtod(number.c_str(), &parse_end);
  if (parse_end != number.c_str() + number.size() || !std::isfinite(amount)) return std::nullopt;
  const std::string_view unit = text.substr(number_end);
  double scale_ms = 0;
  if (unit.empty() || unit == "s")
    scale_ms = 1e3;
  else if (unit == "ms")
    scale_ms = 1;
  else if (unit == "m" || unit == "min")
    scale_ms = 60e3;
  else if (unit == "h")
    scale_ms = 3600e3;
  else
    return std::nullopt;
  const double ms = amount * scale_ms;
  if (ms > 1e12) return std::nullopt;
  return std::chrono::milliseconds(static_cast<long long>(std::llround(ms)));
}

inline std::optional<std::chrono::milliseconds> get_duration(const char* name) {
  const auto text = get(name);
  if (!text) return std::nullopt;
  const auto value = parse_duration(*text);
  if (!value || value->count() <= 0)
    throw error(errc::invalid_argument,
                std::string(name) + "='" + *text + "' is not a positive duration (examples: 30, 30s, 500ms, 2m)");
  return value;
}

// "4096", "64K", "25M", "1G" (binary multiples).
constexpr std::optional<std::size_t> parse_size(std::string_view text) {
  std::size_t scale = 1;
  if (!text.empty() && (text.back() == 'K' || text.back() == 'M' || text.back() == 'G')) {
    scale = text.back() == 'K'   ? std::size_t{1} << 10
            : text.back() == 'M' ? std::size_t{1} << 20
                                 : std::size_t{1} << 30;
    text.remove_suffix(1);
  }
  const auto value = parse_integer(text);
  if (!value || *value < 0) return std::nullopt;
  return static_cast<std::size_t>(*value) * scale;
}

inline std::optional<std::size_t> get_size(const char* name) {
  const auto text = get(name);
  if (!text) return std::nullopt;
  const auto value = parse_size(*text);
  if (!value || *value == 0)
    throw error(errc::invalid_argument,
                std::string(name) + "='" + *text + "' is not a positive size (examples: 4096, 64K, 25M)");
  return value;
}

// Returns the index of the value among `choices`.
inline std::optional<std::size_t> get_choice(const char* name, std::span<const std::string_view> choices) {
  const auto text = get(name);
  if (!text) return std::nullopt;
  std::size_t index = 0;
  std::string expected;
  for (std::string_view choice : choices) {
    if (*text == choice) return index;
    // Appended piece by piece: GCC 12 at -O3 warns falsely (-Wrestrict)
    // about `(cond ? "|" : "") + std::string(choice)`.
    if (index++ > 0) expected += '|';
    expected += choice;
  }
  throw error(errc::invalid_argument, std::string(name) + "='" + *text + "' is not one of " + expected);
}

inline std::optional<std::size_t> get_choice(const char* name, std::initializer_list<std::string_view> choices) {
  return get_choice(name, std::span<const std::string_view>(choices.begin(), choices.size()));
}

}  // namespace chorus::env
