// chorus-perf's side of the harness: a collective is described in one small
// file (perf/allreduce.cpp, perf/gather.cpp, ...) in the manner of
// nccl-tests, and `describe<Descriptor>` turns the description into the
// entry chorus-perf runs. A descriptor says:
//
//   static constexpr std::string_view name;   the command-line name
//   static constexpr bool reduces;            takes --op (instantiated for every
//                                             op; the others for none)
//   static constexpr bool in_place;           has an in-place form
//   double bus_factor(int ranks)              nccl-tests' factor
//   perf::layout shape(elements, ranks)       count and buffer lengths for a size
//   call(context&, buffers<T>&, form, Op)     one call; returns the algorithm
//   wrong(const context&, const buffers<T>&, form, Op)
//                                             elements that differ from expected
//   optional: static label(algorithm)         the algo column (default: its name)
//
// Inputs are small integers, so every sum, product, min, max and avg is exact
// in every element type and a check compares bits.
#pragma once

#include "harness.hpp"

#include <chorus/comm/ucx_communicator.hpp>
#include <chorus/compressed/compression_options.hpp>
#include <chorus/core/algorithm.hpp>
#include <chorus/core/bfloat16.hpp>
#include <chorus/core/half.hpp>
#include <chorus/core/reduce_op.hpp>
#include <chorus/nccl/nccl_compressed_allreduce.hpp>

#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace perf {

// Memory a case's buffers can live in other than the host's (--device
// cuda: chorus-perf.cpp implements it with the CUDA runtime). Inputs are
// written on the host and uploaded; results are downloaded to be checked.
class device_memory {
 public:
  virtual ~device_memory() = default;
  virtual std::string name() const = 0;  // for the table's title
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* data) noexcept = 0;
  virtual void upload(void* device, const void* host, std::size_t bytes) = 0;
  virtual void download(void* host, const void* device, std::size_t bytes) = 0;
  virtual void copy(void* to, const void* from, std::size_t bytes) = 0;  // device to device
};

// chorus-perf's command line.
struct options : sweep_settings {
  std::string collective;
  std::string dtype = "float", op = "sum";
  int root = 0;
  chorus::algorithm algorithm = chorus::algorithm::automatic;                 // --algo
  std::string codec;                                                          // --codec: compressed allreduce
  chorus::compression_scheme scheme = chorus::compression_scheme::automatic;  // --scheme
  std::string device = "host";                                                // --device host|cuda
  device_memory* memory = nullptr;                                            // set for --device cuda
  std::string backend = "ucx";                                                // --backend ucx|nccl|both
  chorus::nccl::communicator* nccl = nullptr;                                 // set while the NCCL sweep runs
};

// The ranks of a chorus communicator; defined in perf/world.cpp so that
// only that file instantiates the collectives the timings travel by.
class communicator_world : public world {
 public:
  explicit communicator_world(chorus::communicator& comm) : comm_(comm) {}
  int rank() const override { return comm_.rank(); }
  int size() const override { return comm_.size(); }
  void barrier() override;
  void sum_min_max(double& sum, double& low, double& high) override;
  void sum(std::uint64_t& count) override;

 private:
  chorus::communicator& comm_;
};

// What a call is given besides its buffers.
struct context {
  chorus::communicator& comm;
  const options& config;
  int rank, ranks;
  chorus::nccl::communicator* nccl = nullptr;  // --backend nccl: the calls go to it

  // call(communicator) on the communicator this sweep measures.
  template <class Call>
  decltype(auto) on(Call&& call) const {
    if (nccl != nullptr) return call(*nccl);
    return call(comm);
  }
};

// nccl-tests' count, and the lengths of the input and output buffers, in elements.
struct layout {
  std::size_t count = 0, input = 0, output = 0;
};

// Collectives over per-rank blocks: a size of `elements` is n blocks of elements / n.
inline layout blocks_in(std::size_t elements, int ranks) {
  const std::size_t block = elements / static_cast<std::size_t>(ranks);
  return {block, block, block * static_cast<std::size_t>(ranks)};
}
inline layout blocks_out(std::size_t elements, int ranks) {
  const layout in = blocks_in(elements, ranks);
  return {in.count, in.output, in.input};
}

// Both buffers are as long as the longer one, so a collective can run in
// place in `input`. With device memory, the collective runs on a device copy
// of each; the host vectors hold what is uploaded and what is downloaded.
template <class T>
struct buffers {
  layout shape;
  std::vector<T> input, output;

  buffers(layout s, device_memory* memory)
      : shape(s),
        input(std::max(s.input, s.output)),
        output(input.size()),
        device_input_(memory, input.size()),
        device_output_(memory, input.size()) {}

  std::span<const T> in() const { return std::span<const T>(input_data(), shape.input); }
  std::span<T> out() { return std::span<T>(device_output_.data ? device_output_.data : output.data(), shape.output); }
  std::span<T> in_place(std::size_t length) { return std::span<T>(input_data(), length); }
  // The output given the input, where the buffers live.
  void copy_input_to_output() {
    if (device_input_.memory)
      device_input_.memory->copy(out().data(), in().data(), in().size_bytes());
    else
      std::copy(in().begin(), in().end(), out().begin());
  }
  void upload() {
    device_input_.upload(input);
    device_output_.upload(output);
  }
  // What a call left in the buffer `f` writes, on the host.
  const std::vector<T>& result(form f) const {
    std::vector<T>& host = const_cast<std::vector<T>&>(f == form::in_place ? input : output);
    (f == form::in_place ? device_input_ : device_output_).download(host);
    return host;
  }

 private:
  struct on_device {
    device_memory* memory;
    T* data = nullptr;
    std::unique_ptr<void, std::function<void(void*)>> owner;
    on_device(device_memory* m, std::size_t n) : memory(m) {
      if (memory == nullptr) return;
      data = static_cast<T*>(memory->allocate(std::max<std::size_t>(n, 1) * sizeof(T)));
      owner = {data, [m](void* p) { m->release(p); }};
    }
    void upload(const std::vector<T>& host) const {
      if (memory && !host.empty()) memory->upload(data, host.data(), host.size() * sizeof(T));
    }
    void download(std::vector<T>& host) const {
      if (memory && !host.empty()) memory->download(host.data(), data, host.size() * sizeof(T));
    }
  };
  T* input_data() const { return device_input_.data ? device_input_.data : const_cast<T*>(input.data()); }

  on_device device_input_, device_output_;
};

// Element `index` of `rank`'s input.
template <class T>
T input_at(const options& config, int rank, std::size_t index) {
  if (config.op == "prod") return static_cast<T>(static_cast<float>(1 + (index + static_cast<std::size_t>(rank)) % 2));
  return static_cast<T>(static_cast<float>((index * 7 + static_cast<std::size_t>(rank) * 3) % 5));
}

// Element `index` of the reduction of every rank's input, computed serially.
template <class T, class Op>
T expected_reduction(const context& c, std::size_t index, Op combine) {
  using A = chorus::accumulator_t<T>;
  A total = static_cast<A>(input_at<T>(c.config, 0, index));
  for (int r = 1; r < c.ranks; ++r) total = combine(total, static_cast<A>(input_at<T>(c.config, r, index)));
  return static_cast<T>(chorus::op::finalize(combine, total, static_cast<std::size_t>(c.ranks)));
}

// How many of result[0, length) differ, bit for bit, from expected(i).
template <class T, class Expected>
std::uint64_t count_wrong(const std::vector<T>& result, std::size_t length, Expected expected) {
  std::uint64_t wrong = 0;
  for (std::size_t i = 0; i < length; ++i) {
    const T want = expected(i);
    wrong += std::memcmp(&result[i], &want, sizeof(T)) != 0;
  }
  return wrong;
}

// Collectives without a reduction operator are instantiated with this one.
struct no_op {};

// Every rank's inputs: element i of rank r is input_at(r, i); outputs cleared.
template <class T>
void fill_inputs(buffers<T>& b, const context& c) {
  for (std::size_t i = 0; i < b.input.size(); ++i) b.input[i] = input_at<T>(c.config, c.rank, i);
  std::fill(b.output.begin(), b.output.end(), T{});
  b.upload();
}

inline std::string algorithm_name(chorus::algorithm used) {
  return used == chorus::algorithm::automatic ? "-" : std::string(chorus::to_string(used));
}

// What a case keeps that depends on neither the element type nor the
// operator, compiled once.
class chorus_case : public benchmark_case {
 public:
  using labeller = std::string (*)(chorus::algorithm);
  chorus_case(const context& c, bool in_place, labeller label) : context_(c), in_place_(in_place), label_(label) {}

  std::size_t bytes() const final { return bytes_; }
  std::size_t count() const final { return shape_.count; }
  bool has(form f) const final { return f == form::out_of_place || in_place_; }
  std::string algorithm() const final { return label_(used_); }

 protected:
  context context_;
  bool in_place_;
  labeller label_;
  layout shape_;
  std::size_t bytes_ = 0;
  chorus::algorithm used_ = chorus::algorithm::automatic;
};

// A descriptor for element type T and operator Op, as the harness's case.
template <class Descriptor, class T, class Op>
class collective_case final : public chorus_case {
 public:
  collective_case(const Descriptor& d, const context& c, Op op)
      : chorus_case(c, Descriptor::in_place, label()), descriptor_(d), op_(op) {}

  void resize(std::size_t bytes) override {
    buffers_.reset();  // one size's device buffers at a time
    buffers_.emplace(descriptor_.shape(std::max<std::size_t>(1, bytes / sizeof(T)), context_.ranks),
                     context_.config.memory);
    shape_ = buffers_->shape;
    bytes_ = buffers_->input.size() * sizeof(T);
  }
  void fill() override { fill_inputs(*buffers_, context_); }
  void run(form f) override { used_ = descriptor_.call(context_, *buffers_, f, op_); }
  std::uint64_t wrong(form f) const override { return descriptor_.wrong(context_, *buffers_, f, op_); }

 private:
  static labeller label() {
    if constexpr (requires { Descriptor::label(chorus::algorithm::automatic); })
      return &Descriptor::label;
    else
      return &algorithm_name;
  }

  const Descriptor& descriptor_;
  Op op_;
  std::optional<buffers<T>> buffers_;
};

// Calls visit(T{}) with the element type called `name`.
template <class Visit>
int with_dtype(std::string_view name, Visit&& visit) {
  if (name == "float") return visit(float{});
  if (name == "double") return visit(double{});
  if (name == "half") return visit(chorus::half{});
  if (name == "bfloat16") return visit(chorus::bfloat16{});
  if (name == "int8") return visit(std::int8_t{});
  if (name == "int32") return visit(std::int32_t{});
  if (name == "int64") return visit(std::int64_t{});
  if (name == "uint8") return visit(std::uint8_t{});
  if (name == "uint32") return visit(std::uint32_t{});
  if (name == "uint64") return visit(std::uint64_t{});
  throw usage_error("unknown --dtype '" + std::string(name) + "'");
}

inline constexpr std::string_view dtype_names = "float double half bfloat16 int8 int32 int64 uint8 uint32 uint64";

// Calls visit(Op{}) with the reduction operator called `name`.
template <class Visit>
int with_op(std::string_view name, Visit&& visit) {
  if (name == "sum") return visit(chorus::op::sum{});
  if (name == "prod") return visit(chorus::op::prod{});
  if (name == "min") return visit(chorus::op::min{});
  if (name == "max") return visit(chorus::op::max{});
  if (name == "avg") return visit(chorus::op::avg{});
  throw usage_error("unknown --op '" + std::string(name) + "'");
}

// The codecs --codec takes (perf/compressed_allreduce.cpp): a name
// chorus::codec::by_name knows, other than none.
inline std::string codec_names() { return chorus::codec::codec_names(); }

inline std::string title_of(const options& config, int ranks) {
  char text[256];
  std::string memory = config.memory ? config.memory->name() : "host memory";
  if (config.nccl != nullptr)
    memory += ", over NCCL (" + config.nccl->through().name() + ")";
  else if (config.backend != "ucx")
    memory += ", over UCX";
  std::snprintf(text, sizeof text,
                "chorus-perf %s: %d ranks, dtype %s, op %s, root %d, %d iterations after %d warm-up, check %s%s%s, %s",
                config.collective.c_str(), ranks, config.dtype.c_str(), config.op.c_str(), config.root,
                config.iterations, config.warmup, config.check ? "on" : "off", config.codec.empty() ? "" : ", codec ",
                config.codec.c_str(), memory.c_str());
  return text;
}

inline int sweep_collective(chorus::communicator& comm, const options& config, bool reduces, double bus_factor,
                            chorus_case& bench) {
  communicator_world ranks(comm);
  table t{title_of(config, comm.size()), config.collective, config.dtype,
          reduces ? config.op : "-",     bus_factor,        {form::out_of_place, form::in_place}};
  return sweep(ranks, config, std::move(t), bench);
}

// Sweeps `d` over the sizes of `config` for element type T and operator Op.
template <class Descriptor, class T, class Op>
int sweep_with(chorus::communicator& comm, const options& config, const Descriptor& d, Op op) {
  collective_case<Descriptor, T, Op> bench(d, context{comm, config, comm.rank(), comm.size(), config.nccl}, op);
  return sweep_collective(comm, config, Descriptor::reduces, d.bus_factor(comm.size()), bench);
}

// A collective as chorus-perf's table of collectives lists it.
struct collective {
  std::string_view name;
  bool reduces;
  int (*run)(chorus::communicator&, const options&);
};

// Every element type, and every op for a collective that reduces.
template <class Descriptor>
int run_described(chorus::communicator& comm, const options& config) {
  const Descriptor d{};
  return with_dtype(config.dtype, [&]<class T>(T) {
    if constexpr (Descriptor::reduces)
      return with_op(config.op, [&]<class Op>(Op op) { return sweep_with<Descriptor, T>(comm, config, d, op); });
    else
      return sweep_with<Descriptor, T>(comm, config, d, no_op{});
  });
}

template <class Descriptor>
constexpr collective describe() {
  return {Descriptor::name, Descriptor::reduces, &run_described<Descriptor>};
}

// The table of collectives, one entry per file in perf/.
extern const collective allreduce_entry, broadcast_entry, reduce_entry, allgather_entry, reduce_scatter_entry,
    alltoall_entry, gather_entry, scatter_entry, sendrecv_entry;
// allreduce with --codec (perf/compressed_allreduce.cpp)
extern const collective compressed_allreduce_entry;

}  // namespace perf
