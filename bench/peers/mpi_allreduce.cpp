// An MPI's MPI_Allreduce (in place, float sum) over the sizes chorus-perf
// sweeps, printing the same columns (peer_sweep.hpp). Built once per MPI
// (bench/peers/CMakeLists.txt): Open MPI as mpi_allreduce, MPICH as
// mpich_allreduce, Intel MPI (PyPI's impi-rt, MPICH's ABI) as
// impi_allreduce; each runs under its own launcher.
//   mpirun.openmpi -np 4 mpi_allreduce -b 8 -e 256M -f 2 -n 20 -w 5
//   mpirun.mpich -np 4 mpich_allreduce -b 8 -e 256M -f 2 -n 20 -w 5
#include "peer_sweep.hpp"

#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  peer::library lib;
  MPI_Comm_rank(MPI_COMM_WORLD, &lib.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &lib.size);
#if defined(CHORUS_PEER_NAME)
  lib.name = CHORUS_PEER_NAME;
#elif defined(MPICH_VERSION)
  lib.name = "MPICH " MPICH_VERSION;
#elif defined(OMPI_MAJOR_VERSION)
  lib.name = "Open MPI " + std::to_string(OMPI_MAJOR_VERSION) + "." + std::to_string(OMPI_MINOR_VERSION);
#else
  lib.name = "MPI";
#endif
  const peer::settings settings = peer::parse(argc, argv);
  lib.prepare = [](std::vector<float>&) {};
  lib.allreduce = [](std::vector<float>& data) {
    MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(data.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  };
  lib.barrier = [] { MPI_Barrier(MPI_COMM_WORLD); };
  lib.over_ranks = [](double& sum, double& low, double& high) {
    MPI_Allreduce(MPI_IN_PLACE, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &low, 1, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &high, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  };
  lib.sum_count = [](std::uint64_t& count) {
    MPI_Allreduce(MPI_IN_PLACE, &count, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
  };
  const int status = peer::run(lib, settings);
  MPI_Finalize();
  return status;
}
