// Run under chorus-run -n N (or across hosts, tests/cross_host): allreduce
// with every algorithm and the other collectives, each with every algorithm
// it has (shared memory when every rank is on one host, hierarchical where
// the hosts hold equal numbers of ranks), as separate processes, against the serial references of
// collective_cases.hpp; results must also be bitwise identical across
// ranks (compared through an allgather of fingerprints). Exit code 0 only if
// everything matched.
#include "../collective_cases.hpp"

#include <cstdio>
#include <initializer_list>
#include <vector>

using namespace chorus_test;

namespace {

std::size_t wrong = 0;
std::vector<std::uint64_t> prints;

// `network` and the host algorithms this job's layout allows.
std::vector<chorus::algorithm> with_host_algorithms(const chorus::communicator& comm,
                                                    std::initializer_list<chorus::algorithm> network) {
  std::vector<chorus::algorithm> algorithms(network);
  const chorus::host_layout& layout = comm.layout();
  if (layout.hosts == 1) algorithms.push_back(chorus::algo::shared_memory);
  if (layout.hosts == 1 || layout.ranks_per_host > 0) algorithms.push_back(chorus::algo::hierarchical);
  return algorithms;
}

template <class T, class Op>
void allreduce_case(chorus::communicator& comm, chorus::algorithm algorithm, std::size_t count, Op op,
                    std::uint64_t seed) {
  auto data = inputs<T>(comm.rank(), count, seed, flavour::general);
  chorus::allreduce(comm, std::span(data), op, algorithm);
  const std::size_t bad =
      count_different(data, reference<T>(all_ranks(comm.size()), count, seed, flavour::general, op));
  if (bad)
    std::printf("allreduce %s %s count %zu: %zu wrong\n", std::string(chorus::to_string(chorus::dtype_of<T>)).c_str(),
                std::string(chorus::to_string(algorithm)).c_str(), count, bad);
  wrong += bad;
  prints.push_back(fingerprint(data.data(), data.size() * sizeof(T)));
}

void data_movement(chorus::communicator& comm, std::size_t count) {
  const int n = comm.size();
  const auto blocks_of = [&](auto rank_inputs) {
    decltype(rank_inputs(0)) all;
    for (int r = 0; r < n; ++r) {
      const auto part = rank_inputs(r);
      all.insert(all.end(), part.begin(), part.end());
    }
    return all;
  };
  for (const auto algorithm : with_host_algorithms(comm, {chorus::algo::tree, chorus::algo::chain})) {
    auto data = comm.rank() == n - 1 ? inputs<float>(n - 1, count, 3, flavour::general) : std::vector<float>(count);
    chorus::broadcast(comm, std::span(data), n - 1, algorithm);
    wrong += count_different(data, inputs<float>(n - 1, count, 3, flavour::general));
  }
  const auto mine = inputs<std::int32_t>(comm.rank(), count, 4, flavour::general);
  const auto expected_all = blocks_of([&](int r) { return inputs<std::int32_t>(r, count, 4, flavour::general); });
  for (const auto algorithm : with_host_algorithms(comm, {chorus::algo::ring, chorus::algo::recursive_doubling})) {
    std::vector<std::int32_t> all(count * static_cast<std::size_t>(n));
    chorus::allgather(comm, std::span(mine), std::span(all), algorithm);
    wrong += count_different(all, expected_all);
  }
  const std::size_t total = count * static_cast<std::size_t>(n);
  const auto input = inputs<double>(comm.rank(), total, 5, flavour::general);
  const auto full = reference<double>(all_ranks(n), total, 5, flavour::general, chorus::op::sum{});
  for (const auto algorithm : with_host_algorithms(comm, {chorus::algo::ring, chorus::algo::recursive_halving})) {
    std::vector<double> output(count);
    chorus::reduce_scatter(comm, std::span(input), std::span(output), chorus::op::sum{}, algorithm);
    for (std::size_t i = 0; i < count; ++i) wrong += output[i] != full[count * comm.rank() + i];
  }
  std::vector<double> reduced(count);
  chorus::reduce(comm, std::span(input).first(count), std::span(reduced), 0, chorus::op::sum{});
  if (comm.rank() == 0)
    wrong += count_different(reduced, reference<double>(all_ranks(n), count, 5, flavour::general, chorus::op::sum{}));
  std::vector<std::int32_t> swapped(total);
  const auto outgoing = inputs<std::int32_t>(comm.rank(), total, 6, flavour::general);
  chorus::alltoall(comm, std::span(outgoing), std::span(swapped));
  for (int from = 0; from < n; ++from) {
    const auto theirs = inputs<std::int32_t>(from, total, 6, flavour::general);
    for (std::size_t i = 0; i < count; ++i) wrong += swapped[from * count + i] != theirs[comm.rank() * count + i];
  }
  std::vector<std::int32_t> gathered(total);
  chorus::gather(comm, std::span(mine), std::span(gathered), n - 1);
  if (comm.rank() == n - 1) wrong += count_different(gathered, expected_all);
  std::vector<std::int32_t> piece(count);
  chorus::scatter(comm, std::span<const std::int32_t>(expected_all), std::span(piece), 0);
  wrong += count_different(piece, mine);
  chorus::barrier(comm);
}

}  // namespace

int main() {
  try {
    chorus::communicator comm = chorus::init();
    const std::size_t n = static_cast<std::size_t>(comm.size());
    const std::vector<std::size_t> counts{0, 1, n - 1, n + 1, 99991, (3u << 20) / 4 + 7};
    for (const auto algorithm :
         with_host_algorithms(comm, {chorus::algo::ring, chorus::algo::recursive_doubling, chorus::algo::rabenseifner,
                                     chorus::algo::tree, chorus::algo::automatic})) {
      std::uint64_t seed = 1;
      for (const std::size_t count : counts) {
        allreduce_case<float>(comm, algorithm, count, chorus::op::sum{}, ++seed);
        allreduce_case<std::int32_t>(comm, algorithm, count, chorus::op::max{}, ++seed);
        allreduce_case<chorus::half>(comm, algorithm, count, chorus::op::sum{}, ++seed);
        allreduce_case<chorus::bfloat16>(comm, algorithm, count, chorus::op::avg{}, ++seed);
      }
    }
    for (const std::size_t count : counts) data_movement(comm, count);
    // Same bits on every rank: compare fingerprints through an allgather.
    std::vector<std::uint64_t> everyone(prints.size() * n);
    chorus::allgather(comm, std::span<const std::uint64_t>(prints), std::span(everyone));
    std::size_t disagreements = 0;
    for (std::size_t r = 0; r < n; ++r)
      for (std::size_t i = 0; i < prints.size(); ++i) disagreements += everyone[r * prints.size() + i] != prints[i];
    std::printf("rank %d of %zu: %zu wrong, %zu disagreements over %zu allreduces\n", comm.rank(), n, wrong,
                disagreements, prints.size());
    return wrong == 0 && disagreements == 0 ? 0 : 1;
  } catch (const chorus::error& failure) {
    std::fprintf(stderr, "%s\n", failure.what());
    return 1;
  }
}
