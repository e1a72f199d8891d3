// world_state: what every communicator of one job on this process shares
// (the transport, the store connection, the settings, the background and
// progress threads, the host table, the flight record), and the order the
// world ends in: the record dumped, queued work finished while the
// transport lives, the store left (its host waiting for the others), then
// the transport closed.
#pragma once

#include <chorus/bootstrap/store.hpp>
#include <chorus/comm/background.hpp>
#include <chorus/comm/host_layout.hpp>
#include <chorus/comm/options.hpp>
#include <chorus/comm/pending_merges.hpp>
#include <chorus/comm/progress_thread.hpp>
#include <chorus/record/dump.hpp>
#include <chorus/record/journal.hpp>
#include <chorus/record/trace_file.hpp>
#include <chorus/transport/transport.hpp>

#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace chorus::pmix {
class session;  // bootstrap/pmix.hpp: only connect() needs its definition
}  // namespace chorus::pmix

namespace chorus {

template <transport::Transport T>
struct world_state {
  settings config;
  std::unique_ptr<store::host> store_host;   // when this rank hosts the store
  std::unique_ptr<store::connection> store;  // null in a single-rank job
  std::shared_ptr<pmix::session> pmix;       // when PMIx started the job (bootstrap/pmix.hpp)
  std::shared_ptr<T> transport;
  std::uint32_t local_ids = 0;  // id source when there is no store
  std::mutex background_mutex;
  std::unique_ptr<background_worker> background;  // started on first use
  std::unique_ptr<progress_thread> progress;      // started on first use
  // The host of each transport rank (0, 1, ... in order of first rank), as
  // connect() learns it; null or empty means one host. Shared, read-only:
  // a simulation's ranks hold one table (sim/run.hpp).
  std::shared_ptr<const std::vector<int>> hosts;
  // The world's ranks grouped by host (host_layout::group(*hosts)), where
  // the ranks share one (a simulation's: sim/run.hpp); else every world
  // communicator groups them on its first layout().
  std::shared_ptr<const host_groups> grouped_hosts;
  std::uint64_t job = 0;  // a hash of the job's token: names what this job makes on a host
  // This process joined the job while it ran (CHORUS_JOIN; connect.hpp).
  bool joined = false;
  // What this rank published in the store: its process identity and UCX
  // worker address; a joiner hands it to the ranks that admit it.
  std::string introduction;
  // What collectives attach to a group of this job (a shared-memory
  // channel), by a key of their own; kept until the world ends.
  std::mutex attachments_mutex;
  std::map<std::string, std::shared_ptr<void>> attachments;
  // Asynchronous schemes open on this process (comm/pending_merges.hpp).
  chorus::pending_merges pending_merges;
  // This rank's flight record: a ring per communicator (record/journal.hpp).
  std::shared_ptr<record::journal> journal;

  world_state() = default;
  world_state(const world_state&) = delete;
  world_state& operator=(const world_state&) = delete;

  // Leave the store first, then (if hosting) wait for the other ranks to
  // leave too, so a fast rank 0 does not pull the store from under them;
  // but not after an error: the others are failing too, and waiting for
  // them would hold this rank up to a whole timeout. A failing rank closes
  // its store connection without leaving: the store tells whoever waits in
  // it (store_protocol.hpp).
  ~world_state() {
    const bool failing = std::uncaught_exceptions() > 0 || (transport && transport->failed());
    if (journal && journal->enabled() && !journal->settings().directory.empty())
      record::dump(*journal, journal->failure().empty() ? "exit" : "error");
    if (failing && transport) transport->abandon();
    background.reset();  // finishes queued collectives while the transport lives
    if constexpr (requires(T& t) { t.poll_in_waits(nullptr); })
      if (transport) transport->poll_in_waits(nullptr);
    progress.reset();
    if (journal) record::write_trace(*journal);                          // CHORUS_TRACE: every call has ended
    if constexpr (requires(T& t) { t.look_up_contacts_with(nullptr); })  // the lookup reads this store
      if (transport) transport->look_up_contacts_with(nullptr);
    if (store && !failing) store->leave();
    store.reset();
    if (store_host && !failing) store_host->wait_until_no_clients(config.timeout);
    transport.reset();
    store_host.reset();
  }
};

}  // namespace chorus
