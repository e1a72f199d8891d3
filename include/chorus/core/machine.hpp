// The machine the cost model prices algorithms on (collective/
// algorithm_list.hpp's seconds()): per path, what a message costs (alpha)
// and a byte moved (beta); a byte reduced (gamma); a byte through a host's
// memory (memory_beta); a flag round trip between a host's ranks (flag).
//
// The defaults are rough figures for the development machine (2 cores, UCX
// shared memory), the same on both paths; where the cost model decides (no
// rule of a collective's defaults matched) only their ratios matter. A
// calibration measures them (chorus-perf calibrate) and writes a machine
// file; CHORUS_MACHINE names one, and every choice is then the cost model's
// with the measured figures (the defaults' rules were measured on another
// machine).
//
// The file, a `name = value` line each, in seconds ('#' starts a comment; a
// name it lacks keeps its default, a name it does not know is an error):
//   within_host.alpha = 2.1e-06      a message between ranks of one host
//   within_host.beta = 1.6e-10       a byte between them
//   between_hosts.alpha = 4.8e-05    a message between hosts
//   between_hosts.beta = 8.4e-09
//   gamma = 1.2e-10                  a byte reduced
//   memory_beta = 9.0e-11            a byte copied through a host's memory
//   flag = 6.0e-07                   a flag round trip between a host's ranks
#pragma once

#include <chorus/core/env.hpp>
#include <chorus/core/error.hpp>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <string_view>

namespace chorus {

// The constants as an algorithm's formula sees them: one path's alpha and
// beta.
struct machine {
  double alpha = 3e-6;
  double beta = 1.0 / 3e9;
  double gamma = 1.0 / 6e9;
  double memory_beta = 1.0 / 8e9;
  double flag = 1e-6;
};

// A path's cost: alpha + bytes * beta.
struct path_cost {
  double alpha = 3e-6;
  double beta = 1.0 / 3e9;
};

struct machine_model {
  path_cost within_host;
  path_cost between_hosts;
  double gamma = machine{}.gamma;
  double memory_beta = machine{}.memory_beta;
  double flag = machine{}.flag;

  // The constants a call on this path is priced with.
  machine on_path(bool between) const noexcept {
    const path_cost& path = between ? between_hosts : within_host;
    return {path.alpha, path.beta, gamma, memory_beta, flag};
  }

  // The file's text (the header's format).
  std::string text() const {
    std::string out;
    const auto line = [&](const char* name, double value, const char* meaning) {
      char row[160];
      std::snprintf(row, sizeof row, "%-20s = %.6g  # %s\n", name, value, meaning);
      out += row;
    };
    line("within_host.alpha", within_host.alpha, "seconds per message between ranks of one host");
    line("within_host.beta", within_host.beta, "seconds per byte between them");
    line("between_hosts.alpha", between_hosts.alpha, "seconds per message between hosts");
    line("between_hosts.beta", between_hosts.beta, "seconds per byte between hosts");
    line("gamma", gamma, "seconds per byte reduced");
    line("memory_beta", memory_beta, "seconds per byte copied through a host's memory");
    line("flag", flag, "seconds per flag round trip between a host's ranks");
    return out;
  }

  // From a file's text; `source` names it in errors. Every value must be a
  // finite number above zero.
  static machine_model parse(std::string_view text, std::string_view source) {
    machine_model model;
    std::istringstream lines{std::string(text)};
    std::string line;
    for (int number = 1; std::getline(lines, line); ++number) {
      if (const auto comment = line.find('#'); comment != std::string::npos) line.resize(comment);
      const std::string_view content = trimmed(line);
      if (content.empty()) continue;
      const auto equals = content.find('=');
      const auto where = [&] { return std::string(source) + " line " + std::to_string(number); };
      if (equals == std::string_view::npos)
        throw error(errc::invalid_argument, where() + ": expected `name = value`, got `" + std::string(content) + "`");
      const std::string_view name = trimmed(content.substr(0, equals));
      double* field = model.field(name);
      if (field == nullptr)
        throw error(errc::invalid_argument, where() + ": unknown name `" + std::string(name) +
                                                "` (within_host.alpha, within_host.beta, between_hosts.alpha, "
                                                "between_hosts.beta, gamma, memory_beta, flag)");
      *field = positive(trimmed(content.substr(equals + 1)), where() + ": " + std::string(name));
    }
    return model;
  }

 private:
  double* field(std::string_view name) noexcept {
    if (name == "within_host.alpha") return &within_host.alpha;
    if (name == "within_host.beta") return &within_host.beta;
    if (name == "between_hosts.alpha") return &between_hosts.alpha;
    if (name == "between_hosts.beta") return &between_hosts.beta;
    if (name == "gamma") return &gamma;
    if (name == "memory_beta") return &memory_beta;
    if (name == "flag") return &flag;
    return nullptr;
  }
  static std::string_view trimmed(std::string_view text) noexcept {
    while (!text.empty() && (text.front() == ' ' || text.front() == '\t' || text.front() == '\r'))
      text.remove_prefix(1);
    while (!text.empty() && (text.back() == ' ' || text.back() == '\t' || text.back() == '\r')) text.remove_suffix(1);
    return text;
  }
  static double positive(std::string_view text, const std::string& what) {
    const std::string copy(text);
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(copy.c_str(), &end);
    if (copy.empty() || end != copy.c_str() + copy.size() || errno != 0 || !std::isfinite(value) || value <= 0)
      throw error(errc::invalid_argument, what + ": `" + copy + "` is not a number of seconds above zero");
    return value;
  }
};

// The line through (bytes, seconds) by least squares: a path's alpha (its
// intercept, at least zero) and beta (its slope). Needs two sizes at least.
inline path_cost fit_path(std::span<const double> bytes, std::span<const double> seconds) {
  if (bytes.size() != seconds.size() || bytes.size() < 2)
    throw error(errc::invalid_argument, "fit_path: needs as many times as sizes, two at least");
  double mean_x = 0, mean_y = 0;
  for (std::size_t k = 0; k < bytes.size(); ++k) mean_x += bytes[k], mean_y += seconds[k];
  mean_x /= double(bytes.size());
  mean_y /= double(bytes.size());
  double covariance = 0, variance = 0;
  for (std::size_t k = 0; k < bytes.size(); ++k) {
    covariance += (bytes[k] - mean_x) * (seconds[k] - mean_y);
    variance += (bytes[k] - mean_x) * (bytes[k] - mean_x);
  }
  if (variance == 0) throw error(errc::invalid_argument, "fit_path: needs two different sizes");
  const double beta = covariance / variance;
  return {std::max(mean_y - beta * mean_x, 0.0), beta};
}

// CHORUS_MACHINE's model, read and parsed at the first call; null when it
// is unset. A file that cannot be read or parsed is an invalid_argument
// error naming it (init() checks it: core/variables.hpp).
inline const machine_model* calibrated_machine() {
  static const std::optional<machine_model> model = []() -> std::optional<machine_model> {
    const std::optional<std::string> path = env::get("CHORUS_MACHINE");
    if (!path || path->empty()) return std::nullopt;
    std::ifstream file(*path);
    if (!file) throw error(errc::invalid_argument, "CHORUS_MACHINE: cannot read " + *path);
    std::ostringstream text;
    text << file.rdbuf();
    return machine_model::parse(text.str(), "CHORUS_MACHINE " + *path);
  }();
  return model ? &*model : nullptr;
}

}  // namespace chorus
