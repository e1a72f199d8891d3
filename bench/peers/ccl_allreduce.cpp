// Intel oneCCL's allreduce (in place, float sum), printing the same columns
// as chorus-perf (peer_sweep.hpp). oneCCL comes from PyPI
// (scripts/install-peers puts it in .peers/oneccl, with the Intel MPI it
// runs over). Ranks come from PMI_RANK/PMI_SIZE (Intel MPI's mpiexec) or
// CHORUS_RANK/CHORUS_SIZE (chorus-run); rank 0 makes oneCCL's key-value
// store and leaves its address in --store DIR (empty, shared by the ranks),
// where the others read it. The transport is CCL_ATL_TRANSPORT's: mpi under
// mpiexec (what bench/compare runs: Intel MPI's shared memory), else OFI
// (libfabric; CCL_ATL_SHM=1 for its shm provider).
//   CCL_ATL_TRANSPORT=mpi .peers/oneccl/bin/mpiexec -n 4 ccl_allreduce --store /tmp/ccl.XXXX -b 1K -e 256M -f 2
#include "peer_sweep.hpp"

#include <oneapi/ccl.hpp>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

namespace {

// Rank 0 writes the address whole (a rename), the others wait for it.
ccl::shared_ptr_class<ccl::kvs> meet(int rank, const std::filesystem::path& store) {
  const std::filesystem::path file = store / "kvs_address";
  if (rank == 0) {
    auto kvs = ccl::create_main_kvs();
    const ccl::kvs::address_type address = kvs->get_address();
    const std::filesystem::path part = store / "kvs_address.part";
    std::ofstream(part, std::ios::binary).write(address.data(), static_cast<std::streamsize>(address.size()));
    std::filesystem::rename(part, file);
    return kvs;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!std::filesystem::exists(file)) {
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "ccl_allreduce: rank 0 left no address in %s within 60 s\n", store.c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ccl::kvs::address_type address{};
  std::ifstream(file, std::ios::binary).read(address.data(), static_cast<std::streamsize>(address.size()));
  return ccl::create_kvs(address);
}

}  // namespace

int main(int argc, char** argv) {
  std::string store_dir;
  std::vector<char*> rest = peer::take_flags(argc, argv, {{"--store", &store_dir}});
  if (store_dir.empty()) {
    std::fprintf(stderr, "ccl_allreduce: --store DIR is required\n");
    return 2;
  }
  const peer::settings settings = peer::parse(static_cast<int>(rest.size()), rest.data());
  peer::library lib;
  lib.rank = peer::from_launcher("ccl_allreduce", {"PMI_RANK", "CHORUS_RANK"});
  lib.size = peer::from_launcher("ccl_allreduce", {"PMI_SIZE", "CHORUS_SIZE"});
  ccl::init();
  lib.name = std::string("oneCCL ") + ccl::get_library_version().full;
  auto comm = ccl::create_communicator(lib.size, lib.rank, meet(lib.rank, store_dir));

  lib.prepare = [](std::vector<float>&) {};
  lib.allreduce = [&](std::vector<float>& data) {
    ccl::allreduce(data.data(), data.data(), data.size(), ccl::reduction::sum, comm).wait();
  };
  lib.barrier = [&] { ccl::barrier(comm).wait(); };
  lib.over_ranks = [&](double& sum, double& low, double& high) {
    ccl::allreduce(&sum, &sum, 1, ccl::reduction::sum, comm).wait();
    ccl::allreduce(&low, &low, 1, ccl::reduction::min, comm).wait();
    ccl::allreduce(&high, &high, 1, ccl::reduction::max, comm).wait();
  };
  lib.sum_count = [&](std::uint64_t& count) { ccl::allreduce(&count, &count, 1, ccl::reduction::sum, comm).wait(); };
  return peer::run(lib, settings);
}
