// Gloo's allreduce algorithms over its TCP transport (in place, float sum),
// printing the same columns as chorus-perf (peer_sweep.hpp). Ranks come from
// CHORUS_RANK/CHORUS_SIZE (start it with chorus-run); they meet through a
// Gloo FileStore in --store DIR (empty, shared by the ranks), each listening
// on --bind ADDRESS (default 127.0.0.1; a host's own address across hosts).
//   chorus-run -n 4 gloo_allreduce --store /tmp/gloo.XXXX --algo ring|ring_chunked|halving_doubling
#include "peer_sweep.hpp"

#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/barrier_all_to_all.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <memory>

int main(int argc, char** argv) {
  std::string store_dir, listen_address = "127.0.0.1";
  std::vector<char*> rest = peer::take_flags(argc, argv, {{"--store", &store_dir}, {"--bind", &listen_address}});
  if (store_dir.empty()) {
    std::fprintf(stderr, "gloo_allreduce: --store DIR is required\n");
    return 2;
  }
  peer::settings settings = peer::parse(static_cast<int>(rest.size()), rest.data());
  if (settings.algorithm == "default") settings.algorithm = "ring";
  peer::library lib;
  lib.rank = peer::from_launcher("gloo_allreduce", {"CHORUS_RANK"});
  lib.size = peer::from_launcher("gloo_allreduce", {"CHORUS_SIZE"});
  lib.name = "Gloo " + settings.algorithm;

  gloo::transport::tcp::attr attributes(listen_address.c_str());
  auto device = gloo::transport::tcp::CreateDevice(attributes);
  gloo::rendezvous::FileStore file_store(store_dir);
  auto context = std::make_shared<gloo::rendezvous::Context>(lib.rank, lib.size);
  context->connectFullMesh(file_store, device);

  std::unique_ptr<gloo::Algorithm> algorithm;
  std::vector<float*> pointers(1);
  lib.prepare = [&](std::vector<float>& data) {
    pointers[0] = data.data();
    const int count = static_cast<int>(data.size());
    if (settings.algorithm == "ring")
      algorithm = std::make_unique<gloo::AllreduceRing<float>>(context, pointers, count);
    else if (settings.algorithm == "ring_chunked")
      algorithm = std::make_unique<gloo::AllreduceRingChunked<float>>(context, pointers, count);
    else if (settings.algorithm == "halving_doubling")
      algorithm = std::make_unique<gloo::AllreduceHalvingDoubling<float>>(context, pointers, count);
    else {
      std::fprintf(stderr, "gloo_allreduce: unknown --algo %s\n", settings.algorithm.c_str());
      std::exit(2);
    }
  };
  lib.allreduce = [&](std::vector<float>&) { algorithm->run(); };
  // Small exchanges of statistics through a Gloo ring over its own buffers.
  std::vector<double> stats(3);
  std::vector<double*> stat_pointers{stats.data()};
  lib.over_ranks = [&](double& sum, double& low, double& high) {
    std::vector<double> all(static_cast<std::size_t>(lib.size) * 3, 0.0);
    all[static_cast<std::size_t>(lib.rank) * 3 + 0] = sum;
    all[static_cast<std::size_t>(lib.rank) * 3 + 1] = low;
    all[static_cast<std::size_t>(lib.rank) * 3 + 2] = high;
    std::vector<double*> p{all.data()};
    gloo::AllreduceRing<double>(context, p, static_cast<int>(all.size())).run();  // sum of one-hot rows
    sum = 0;
    low = all[1];
    high = all[2];
    for (int r = 0; r < lib.size; ++r) {
      sum += all[static_cast<std::size_t>(r) * 3];
      low = std::min(low, all[static_cast<std::size_t>(r) * 3 + 1]);
      high = std::max(high, all[static_cast<std::size_t>(r) * 3 + 2]);
    }
  };
  lib.sum_count = [&](std::uint64_t& count) {
    std::vector<double> value{static_cast<double>(count)};
    std::vector<double*> p{value.data()};
    gloo::AllreduceRing<double>(context, p, 1).run();
    count = static_cast<std::uint64_t>(value[0]);
  };
  lib.barrier = [&] { gloo::BarrierAllToAll(context).run(); };
  const int status = peer::run(lib, settings);
  // Leave together: a rank that closes its sockets while a peer still reads
  // makes that peer's last receive fail.
  gloo::BarrierAllToAll(context).run();
  return status;
}
