// Who am I in this job? Rank, size and the rendezvous address, read from the
// environment that a launcher left.
//
// CHORUS_BOOTSTRAP chooses the source: `pmix` (the launcher's PMIx server:
// rank, size, placement and the address exchange; bootstrap/pmix.hpp),
// `store` (the variables below and the rendezvous store), `auto` (the
// default: PMIx when the process runs under a PMIx server, chorus was built
// with it and CHORUS_RANK is unset, else store). `torch` is the Python
// backend's: torch's store tells where chorus's store is.
//
// The store's sources, first match wins:
//   CHORUS_RANK / CHORUS_SIZE           (chorus-run, or set by hand)
//   OMPI_COMM_WORLD_RANK / _SIZE        (Open MPI's mpirun)
//   PMI_RANK / PMI_SIZE                 (MPICH Hydra, Intel MPI)
//   SLURM_PROCID / SLURM_NTASKS         (srun)
//   nothing: a single-rank job.
// CHORUS_JOIN=1 with CHORUS_SIZE: this process joins a running job of that
// many ranks (comm/connect.hpp); its rank comes from the store.
// The rendezvous store is at CHORUS_ADDR (host:port), joined with the shared
// CHORUS_TOKEN. Rank 0 hosts it unless CHORUS_LAUNCHER says a launcher does.
// Ranks on this node: CHORUS_LOCAL_SIZE, OMPI_COMM_WORLD_LOCAL_SIZE,
// MPI_LOCALNRANKS, SLURM_NTASKS_PER_NODE, else the whole job.
#pragma once

#include <chorus/core/env.hpp>
#include <chorus/core/error.hpp>
#include <chorus/transport/transport.hpp>

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace chorus::bootstrap {

struct address {
  std::string host;
  std::uint16_t port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};

// Parses "host:port" or "[ipv6]:port".
inline address parse_address(std::string_view text, std::string_view source = "CHORUS_ADDR") {
  const auto bad = [&](const char* why) {
    return error(errc::invalid_argument, std::string(source) + "='" + std::string(text) + "' " + why +
                                             " (expected host:port, e.g. 127.0.0.1:29500)");
  };
  const std::size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0) throw bad("has no host:port form");
  std::string_view host = text.substr(0, colon);
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) throw bad("has an unclosed IPv6 bracket");
    host = host.substr(1, host.size() - 2);
  }
  const auto port = env::parse_integer(text.substr(colon + 1));
  if (!port || *port < 1 || *port > 65535) throw bad("has no port in 1..65535");
  return {std::string(host), static_cast<std::uint16_t>(*port)};
}

// Where the store is, told through a key-value store the launcher already
// has (torch.distributed's, for the chorus backend): rank 0 hosts chorus's
// store at launch_info::store (port 0: any free port) and publishes where it
// listens; every other rank looks the address up, waiting as that store waits.
struct store_rendezvous {
  std::function<void(const address& hosted)> publish;  // rank 0
  std::function<address()> look_up;                    // the other ranks
};

struct launch_info {
  int rank = 0;
  int size = 1;
  int local_size = 1;
  std::optional<address> store;  // required when size > 1, unless a rendezvous tells it
  std::string token;
  bool launcher_hosts_store = false;
  std::string source = "single rank";  // which variables told us
  std::optional<store_rendezvous> rendezvous;
  bool joining = false;  // joins a running job: `rank` is assigned at connect()
  bool pmix = false;     // rank, size and addresses come from PMIx at connect()
};

// Whether `auto` finds a PMIx server to use (pmix.hpp's server_present,
// without its header: this one stays free of PMIx).
inline bool pmix_usable() {
#if defined(CHORUS_HAVE_PMIX)
  return env::get("PMIX_RANK").has_value() && env::get("PMIX_NAMESPACE").has_value();
#else
  return false;
#endif
}

namespace detail {

inline bool read_pair(launch_info& info, const char* rank_name, const char* size_name) {
  const auto rank = env::get_integer(rank_name, 0, transport::max_ranks - 1);
  const auto size = env::get_integer(size_name, 1, transport::max_ranks);
  if (!rank && !size) return false;
  if (!rank || !size)
    throw error(errc::invalid_argument, std::string(rank_name) + " and " + size_name + " must be set together");
  if (*rank >= *size)
    throw error(errc::invalid_argument, std::string(rank_name) + "=" + std::to_string(*rank) + " is not below " +
                                            size_name + "=" + std::to_string(*size));
  info.rank = static_cast<int>(*rank);
  info.size = static_cast<int>(*size);
  info.source = std::string(rank_name) + "/" + size_name;
  return true;
}

inline int local_size(int size) {
  for (const char* name :
       {"CHORUS_LOCAL_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "SLURM_NTASKS_PER_NODE"})
    if (const auto value = env::get_integer(name, 1, transport::max_ranks)) return static_cast<int>(*value);
  return size;
}

}  // namespace detail

inline constexpr std::array<std::string_view, 4> bootstrap_choices{"auto", "pmix", "store", "torch"};

inline launch_info discover() {
  launch_info info;
  const std::size_t bootstrap = env::get_choice("CHORUS_BOOTSTRAP", bootstrap_choices).value_or(0);
  if (bootstrap == 3)
    throw error(errc::invalid_argument,
                "CHORUS_BOOTSTRAP=torch is for init_process_group(\"chorus\"); init() takes pmix, store or auto",
                {-1, -1, "bootstrap"});
  const bool chorus_run = env::get("CHORUS_RANK").has_value() || env::get("CHORUS_JOIN").has_value();
  if (bootstrap == 1 || (bootstrap == 0 && !chorus_run && pmix_usable())) {
    info.pmix = true;  // connect() opens the session: it says what is missing, if anything
    info.source = "PMIx";
    info.token = env::get("CHORUS_TOKEN").value_or("");
    return info;
  }
  if (env::get_integer("CHORUS_JOIN", 0, 1).value_or(0) == 1) {
    const auto size = env::get_integer("CHORUS_SIZE", 1, transport::max_ranks);
    if (!size) throw error(errc::invalid_argument, "CHORUS_JOIN=1 needs CHORUS_SIZE, the running job's size");
    info.joining = true;
    info.size = static_cast<int>(*size);
    info.rank = -1;
    info.source = "CHORUS_JOIN/CHORUS_SIZE";
  } else {
    (void)(detail::read_pair(info, "CHORUS_RANK", "CHORUS_SIZE") ||
           detail::read_pair(info, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE") ||
           detail::read_pair(info, "PMI_RANK", "PMI_SIZE") || detail::read_pair(info, "SLURM_PROCID", "SLURM_NTASKS"));
  }
  info.local_size = detail::local_size(info.size);
  if (const auto text = env::get("CHORUS_ADDR")) {
    try {
      info.store = parse_address(*text);
    } catch (const error& failure) {
      throw with_rank(failure, info.rank, "bootstrap");
    }
  }
  info.token = env::get("CHORUS_TOKEN").value_or("");
  info.launcher_hosts_store = env::get("CHORUS_LAUNCHER").has_value();
  if ((info.size > 1 || info.joining) && !info.store)
    throw error(errc::invalid_argument,
                "CHORUS_ADDR is not set: a job of " + std::to_string(info.size) + " ranks (from " + info.source +
                    ") needs the rendezvous address host:port; chorus-run sets it, with mpirun "
                    "pass -x CHORUS_ADDR=<rank-0 host>:<port>",
                {info.rank, -1, "bootstrap"});
  return info;
}

}  // namespace chorus::bootstrap
