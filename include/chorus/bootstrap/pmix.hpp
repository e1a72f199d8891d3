// PMIx: the bootstrap a cluster launcher serves (srun --mpi=pmix, Open MPI's
// mpirun/prterun). A process it started learns its rank, the job's size
// and its place on its node from the launcher's PMIx server, and the ranks
// exchange what they publish with PMIx_Put / PMIx_Commit / PMIx_Fence /
// PMIx_Get, so start-up makes no request to a store on rank 0: one fence,
// after which every rank's values are read locally from the node's server.
//
// Chosen by CHORUS_BOOTSTRAP (bootstrap/environment.hpp): `auto` takes PMIx
// when the process runs under a PMIx server (PMIX_RANK and PMIX_NAMESPACE
// are set) and chorus was built with it (Debian's libpmix-dev; CMake's
// chorus::runtime or the header-only target defines CHORUS_HAVE_PMIX).
//
// Linked with chorus::runtime this header only declares, like
// store_open.hpp: the PMIx client code is compiled once, in the library.
#pragma once

#include <chorus/bootstrap/store_open.hpp>  // CHORUS_RUNTIME_API

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

namespace chorus::pmix {

// This process's place in the job, as the PMIx server tells it.
struct placement {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  std::string nspace;
};

// A PMIx client session: PMIx_Init when made, PMIx_Finalize when destroyed.
class session {
 public:
  virtual ~session() = default;
  virtual const placement& where() const noexcept = 0;
  // Publishes this rank's `key` (visible to every rank after the next fence).
  virtual void put(std::string_view key, std::string_view value) = 0;
  // Commits what was put and waits until every rank of the job has,
  // collecting all of it on this node; bounded by `timeout`.
  virtual void fence(std::chrono::milliseconds timeout) = 0;
  // Rank `rank`'s `key`, as published before the last fence.
  virtual std::string get(int rank, std::string_view key) = 0;
  // The node rank `rank` runs on (PMIX_NODEID): ranks with equal ids share a machine.
  virtual long node_of(int rank) = 0;
};

// Whether this build can speak PMIx.
CHORUS_RUNTIME_API bool built_in();
// Whether this process was started by a PMIx server (its variables are set).
CHORUS_RUNTIME_API bool server_present();
// Connects to the server: errc::unavailable when the build has no PMIx or
// the process has no server, errc::transport when PMIx_Init fails.
CHORUS_RUNTIME_API std::shared_ptr<session> open_session();

}  // namespace chorus::pmix

#if !defined(CHORUS_SEPARATE_RUNTIME)
#include <chorus/bootstrap/pmix_impl.hpp>
#endif
