// The PMIx client behind bootstrap/pmix.hpp: compiled once in
// chorus::runtime, or inline in a header-only build. Without
// CHORUS_HAVE_PMIX it only says that PMIx is not built in.
#pragma once

#include <chorus/bootstrap/pmix.hpp>
#include <chorus/core/env.hpp>
#include <chorus/core/error.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#if defined(CHORUS_HAVE_PMIX)
#include <pmix.h>
#endif

namespace chorus::pmix {

CHORUS_RUNTIME_API bool server_present() {
  return env::get("PMIX_RANK").has_value() && env::get("PMIX_NAMESPACE").has_value();
}

#if defined(CHORUS_HAVE_PMIX)

CHORUS_RUNTIME_API bool built_in() { return true; }

namespace detail {

[[noreturn]] inline void fail(const char* call, pmix_status_t status, int rank, int peer = -1) {
  throw error(errc::transport, std::string(call) + ": " + PMIx_Error_string(status), {rank, peer, "pmix"});
}

// A value PMIx_Get returned, freed on scope exit.
struct value_ptr {
  pmix_value_t* value = nullptr;
  value_ptr() = default;
  value_ptr(const value_ptr&) = delete;
  value_ptr& operator=(const value_ptr&) = delete;
  ~value_ptr() {
    if (value != nullptr) PMIX_VALUE_RELEASE(value);
  }
};

// Any unsigned or signed integer PMIx hands back for a count or an id.
inline long long integer_of(const pmix_value_t& value, const char* key, int rank) {
  switch (value.type) {
    case PMIX_UINT8: return value.data.uint8;
    case PMIX_UINT16: return value.data.uint16;
    case PMIX_UINT32: return value.data.uint32;
    case PMIX_UINT64: return static_cast<long long>(value.data.uint64);
    case PMIX_INT: return value.data.integer;
    case PMIX_INT32: return value.data.int32;
    case PMIX_INT64: return value.data.int64;
    case PMIX_SIZE: return static_cast<long long>(value.data.size);
    case PMIX_PROC_RANK: return value.data.rank;
    default:
      throw error(errc::mismatch, std::string("PMIx gave ") + key + " as type " + std::to_string(value.type),
                  {rank, -1, "pmix"});
  }
}

class client final : public session {
 public:
  client() {
    pmix_proc_t self;
    PMIX_PROC_CONSTRUCT(&self);
    if (const pmix_status_t status = PMIx_Init(&self, nullptr, 0); status != PMIX_SUCCESS)
      fail("PMIx_Init", status, -1);
    self_ = self;
    where_.rank = static_cast<int>(self.rank);
    where_.nspace = self.nspace;
    where_.size = static_cast<int>(job_integer(PMIX_JOB_SIZE));
    where_.local_size = static_cast<int>(job_integer(PMIX_LOCAL_SIZE));
    where_.local_rank = static_cast<int>(own_integer(PMIX_LOCAL_RANK));
  }
  ~client() override { PMIx_Finalize(nullptr, 0); }

  const placement& where() const noexcept override { return where_; }

  void put(std::string_view key, std::string_view value) override {
    pmix_value_t boxed;
    PMIX_VALUE_CONSTRUCT(&boxed);
    boxed.type = PMIX_BYTE_OBJECT;
    boxed.data.bo.bytes = const_cast<char*>(value.data());  // PMIx_Put copies it
    boxed.data.bo.size = value.size();
    const std::string name = key_name(key);
    if (const pmix_status_t status = PMIx_Put(PMIX_GLOBAL, name.c_str(), &boxed); status != PMIX_SUCCESS)
      fail("PMIx_Put", status, where_.rank);
  }

  void fence(std::chrono::milliseconds timeout) override {
    if (const pmix_status_t status = PMIx_Commit(); status != PMIX_SUCCESS) fail("PMIx_Commit", status, where_.rank);
    bool collect = true;
    int seconds = static_cast<int>(std::max<long long>(1, (timeout.count() + 999) / 1000));
    pmix_info_t info[2];
    PMIX_INFO_CONSTRUCT(&info[0]);
    PMIX_INFO_CONSTRUCT(&info[1]);
    PMIX_INFO_LOAD(&info[0], PMIX_COLLECT_DATA, &collect, PMIX_BOOL);
    PMIX_INFO_LOAD(&info[1], PMIX_TIMEOUT, &seconds, PMIX_INT);
    const pmix_status_t status = PMIx_Fence(nullptr, 0, info, 2);
    PMIX_INFO_DESTRUCT(&info[0]);
    PMIX_INFO_DESTRUCT(&info[1]);
    if (status == PMIX_ERR_TIMEOUT)
      throw error(errc::timeout, "PMIx_Fence: not every rank arrived within " + std::to_string(seconds) + " s",
                  {where_.rank, -1, "pmix"});
    if (status != PMIX_SUCCESS) fail("PMIx_Fence", status, where_.rank);
  }

  std::string get(int rank, std::string_view key) override {
    value_ptr got;
    fetch(rank, key_name(key).c_str(), got);
    if (got.value->type != PMIX_BYTE_OBJECT)
      throw error(errc::mismatch, "rank " + std::to_string(rank) + "'s " + std::string(key) + " is not bytes",
                  {where_.rank, rank, "pmix"});
    return {got.value->data.bo.bytes, got.value->data.bo.size};
  }

  long node_of(int rank) override {
    if (!node_of_rank_) node_of_rank_ = resolve_nodes();  // once: a failed resolve is not retried per rank
    if (!node_of_rank_->empty()) return node_of_rank_->at(static_cast<std::size_t>(rank));
    value_ptr got;  // no map from the launcher: the rank's own PMIX_NODEID
    fetch(rank, PMIX_NODEID, got);
    return static_cast<long>(integer_of(*got.value, PMIX_NODEID, where_.rank));
  }

 private:
  // chorus's keys live under their own prefix, clear of PMIx's "pmix.".
  static std::string key_name(std::string_view key) {
    std::string name = "chorus." + std::string(key);
    if (name.size() > PMIX_MAX_KEYLEN)
      throw error(errc::invalid_argument, "PMIx key '" + name + "' is longer than PMIX_MAX_KEYLEN", {-1, -1, "pmix"});
    return name;
  }

  void fetch(int rank, const char* key, value_ptr& got) {
    pmix_proc_t proc;
    PMIX_PROC_LOAD(&proc, where_.nspace.c_str(), static_cast<pmix_rank_t>(rank));
    if (const pmix_status_t status = PMIx_Get(&proc, key, nullptr, 0, &got.value); status != PMIX_SUCCESS)
      throw error(errc::transport, std::string("PMIx_Get ") + key + ": " + PMIx_Error_string(status),
                  {where_.rank, rank, "pmix"});
  }

  // Every rank's node, numbered in the launcher's node list: PMIx_Resolve_nodes
  // names the job's nodes and PMIx_Resolve_peers each one's ranks, both
  // answered by this node's PMIx server from the job's map. (Open MPI 4's
  // server has PMIX_NODEID for this node's ranks only.) Empty where the
  // server has no map or it does not cover every rank.
  std::vector<long> resolve_nodes() {
    char* listed = nullptr;
    if (PMIx_Resolve_nodes(self_.nspace, &listed) != PMIX_SUCCESS || listed == nullptr) return {};
    const std::string nodes(listed);
    std::free(listed);
    std::vector<long> node_of_rank(static_cast<std::size_t>(where_.size), -1);
    long node = 0;
    for (std::size_t begin = 0; begin <= nodes.size(); ++node) {
      const std::size_t end = std::min(nodes.find(',', begin), nodes.size());
      const std::string name = nodes.substr(begin, end - begin);
      begin = end + 1;
      pmix_proc_t* procs = nullptr;
      std::size_t count = 0;
      if (PMIx_Resolve_peers(name.c_str(), self_.nspace, &procs, &count) != PMIX_SUCCESS) return {};
      for (std::size_t i = 0; i < count; ++i)
        if (procs[i].rank < node_of_rank.size()) node_of_rank[procs[i].rank] = node;
      if (procs != nullptr) PMIX_PROC_FREE(procs, count);
    }
    if (std::find(node_of_rank.begin(), node_of_rank.end(), -1) != node_of_rank.end()) return {};
    return node_of_rank;
  }

  long long job_integer(const char* key) {
    value_ptr got;
    pmix_proc_t job;
    PMIX_PROC_LOAD(&job, self_.nspace, PMIX_RANK_WILDCARD);
    if (const pmix_status_t status = PMIx_Get(&job, key, nullptr, 0, &got.value); status != PMIX_SUCCESS)
      fail(key, status, where_.rank);
    return integer_of(*got.value, key, where_.rank);
  }
  long long own_integer(const char* key) {
    value_ptr got;
    if (const pmix_status_t status = PMIx_Get(&self_, key, nullptr, 0, &got.value); status != PMIX_SUCCESS)
      fail(key, status, where_.rank);
    return integer_of(*got.value, key, where_.rank);
  }

  pmix_proc_t self_;
  placement where_;
  std::optional<std::vector<long>> node_of_rank_;  // resolve_nodes(), on first use
};

}  // namespace detail

CHORUS_RUNTIME_API std::shared_ptr<session> open_session() {
  if (!server_present())
    throw error(errc::unavailable,
                "CHORUS_BOOTSTRAP=pmix: this process was not started by a PMIx server (srun --mpi=pmix, mpirun, "
                "prterun: PMIX_RANK and PMIX_NAMESPACE are unset)",
                {-1, -1, "bootstrap"});
  return std::make_shared<detail::client>();
}

#else

CHORUS_RUNTIME_API bool built_in() { return false; }

CHORUS_RUNTIME_API std::shared_ptr<session> open_session() {
  throw error(errc::unavailable,
              "CHORUS_BOOTSTRAP=pmix: this chorus was built without PMIx (install libpmix-dev and reconfigure)",
              {-1, -1, "bootstrap"});
}

#endif

}  // namespace chorus::pmix
