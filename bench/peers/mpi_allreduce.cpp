// Open MPI's MPI_Allreduce (in place, float sum) over the sizes chorus-perf
// sweeps, printing the same columns (peer_sweep.hpp).
//   mpirun -np 4 mpi_allreduce -b 8 -e 256M -f 2 -n 20 -w 5
#include "peer_sweep.hpp"

#include <mpi.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  peer::library lib;
  MPI_Comm_rank(MPI_COMM_WORLD, &lib.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &lib.size);
  lib.name = "Open MPI";
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
