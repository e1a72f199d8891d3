// The W-jet tagger in LibTorch, as examples/python/train_jet_tagger.py has
// it: the same two networks (built in the same order from the same seed,
// so they start from the same weights as the Python ones), the same inputs
// from generate_jets.py's file, the same held-out split, the same shuffles
// (torch's generator seeded alike) and the same metrics (the ROC AUC as the
// Mann-Whitney statistic, ties counted half; the background rejection at
// 50% signal efficiency with NumPy's linear quantile).
#pragma once

#include "npz.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <span>
#include <string>
#include <vector>

namespace jets {

// A network: its module (the parameters) and its forward function.
struct network {
  std::shared_ptr<torch::nn::Module> module;
  std::function<torch::Tensor(const torch::Tensor&)> forward;
};

// A small CNN on the 32x32 images: three 2x2-pooled convolutions, two dense layers.
inline network cnn() {
  torch::manual_seed(0);  // every rank (and the Python trainer) starts from the same model
  namespace nn = torch::nn;
  nn::Sequential layers;  // pushed one by one: arguments' evaluation order would draw the weights in another
  layers->push_back(nn::Conv2d(nn::Conv2dOptions(1, 8, 5).padding(2)));
  layers->push_back(nn::ReLU());
  layers->push_back(nn::MaxPool2d(2));
  layers->push_back(nn::Conv2d(nn::Conv2dOptions(8, 16, 3).padding(1)));
  layers->push_back(nn::ReLU());
  layers->push_back(nn::MaxPool2d(2));
  layers->push_back(nn::Conv2d(nn::Conv2dOptions(16, 16, 3).padding(1)));
  layers->push_back(nn::ReLU());
  layers->push_back(nn::MaxPool2d(2));
  layers->push_back(nn::Flatten());
  layers->push_back(nn::Linear(16 * 4 * 4, 64));
  layers->push_back(nn::ReLU());
  layers->push_back(nn::Linear(64, 1));
  return {layers.ptr(), [layers](const torch::Tensor& x) mutable { return layers->forward(x); }};
}

// Deep sets on the constituents: phi on each, a masked sum, rho on the sum.
struct DeepSetsImpl : torch::nn::Module {
  torch::nn::Sequential phi{torch::nn::Linear(3, 64), torch::nn::ReLU(), torch::nn::Linear(64, 64), torch::nn::ReLU()};
  torch::nn::Sequential rho{torch::nn::Linear(64, 64), torch::nn::ReLU(), torch::nn::Linear(64, 1)};
  DeepSetsImpl() {
    register_module("phi", phi);
    register_module("rho", rho);
  }
  torch::Tensor forward(const torch::Tensor& constituents) {
    const torch::Tensor held = (constituents.narrow(-1, 0, 1) != 0).to(torch::kFloat);  // zero rows: padding
    return rho->forward((phi->forward(constituents) * held).sum(1) / 10.0);
  }
};
TORCH_MODULE(DeepSets);

inline network deepsets() {
  torch::manual_seed(0);
  DeepSets made;
  return {made.ptr(), [made](const torch::Tensor& x) mutable { return made->forward(x); }};
}

inline network model_named(const std::string& name) {
  if (name == "cnn") return cnn();
  if (name == "deepsets") return deepsets();
  throw std::invalid_argument("--model is cnn or deepsets, not " + name);
}

struct sample {
  torch::Tensor train_inputs, train_labels, test_inputs, test_labels;  // float32; labels 1: W
};

// The network's input: images scaled to order one per pixel that holds pT,
// or the constituents as (log pT + 1, d_eta, d_phi) with padding rows zero.
// The last `test_fraction` of the file (W and QCD interleaved) is held out.
inline sample load(const std::string& path, const std::string& model, double test_fraction) {
  const npz::archive file = npz::read(path);
  const npz::array& labels = file.at("labels");
  const auto n = static_cast<std::int64_t>(labels.elements());
  const auto as_tensor = [](const npz::array& a) {
    std::vector<std::int64_t> shape(a.shape().begin(), a.shape().end());
    return torch::from_blob(const_cast<float*>(a.values<float>().data()), shape, torch::kFloat).clone();
  };
  torch::Tensor inputs;
  if (model == "cnn") {
    inputs = as_tensor(file.at("images")).unsqueeze(1) * 10.0;
  } else {
    inputs = as_tensor(file.at("constituents"));
    const torch::Tensor pt = inputs.select(-1, 0);
    pt.copy_(torch::where(pt > 0, torch::log(torch::clamp_min(pt, 1e-3)) + 1.0, torch::zeros_like(pt)));
  }
  const std::span<const std::uint8_t> label_bytes = labels.values<std::uint8_t>();
  torch::Tensor targets = torch::empty({n}, torch::kFloat);
  std::copy(label_bytes.begin(), label_bytes.end(), targets.data_ptr<float>());
  const auto held_out = static_cast<std::int64_t>(std::llround(static_cast<double>(n) * test_fraction));
  const std::int64_t train = n - held_out;
  return {inputs.narrow(0, 0, train), targets.narrow(0, 0, train), inputs.narrow(0, train, held_out),
          targets.narrow(0, train, held_out)};
}

inline std::vector<double> scores_of(network& model, const torch::Tensor& inputs, std::int64_t batch = 4096) {
  torch::NoGradGuard no_gradients;
  std::vector<double> scores;
  for (std::int64_t k = 0; k < inputs.size(0); k += batch) {
    const torch::Tensor out =
        model.forward(inputs.narrow(0, k, std::min(batch, inputs.size(0) - k))).flatten().contiguous();
    scores.insert(scores.end(), out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
  }
  return scores;
}

// P(a W jet scores above a QCD jet), ties half: the Mann-Whitney statistic
// over the scores' ranks, a run of equal scores sharing its mean rank.
inline double roc_auc(const std::vector<double>& scores, const std::vector<int>& labels) {
  std::vector<std::size_t> order(scores.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return scores[a] < scores[b]; });
  double rank_sum = 0, positives = 0;
  for (std::size_t start = 0; start < order.size();) {
    std::size_t end = start;
    while (end < order.size() && scores[order[end]] == scores[order[start]]) ++end;
    const double mean_rank = (static_cast<double>(start) + 1 + static_cast<double>(end)) / 2;  // ranks start+1..end
    for (std::size_t i = start; i < end; ++i)
      if (labels[order[i]] == 1) rank_sum += mean_rank, positives += 1;
    start = end;
  }
  const double negatives = static_cast<double>(scores.size()) - positives;
  return (rank_sum - positives * (positives + 1) / 2) / (positives * negatives);
}

// 1 / (the QCD jets' efficiency) at the cut keeping `efficiency` of the W
// jets (NumPy's default, linear, quantile); infinity where it keeps none.
inline double rejection_at(const std::vector<double>& scores, const std::vector<int>& labels, double efficiency = 0.5) {
  std::vector<double> signal;
  for (std::size_t i = 0; i < scores.size(); ++i)
    if (labels[i] == 1) signal.push_back(scores[i]);
  std::sort(signal.begin(), signal.end());
  const double position = (1.0 - efficiency) * static_cast<double>(signal.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, signal.size() - 1);
  const double cut = signal[below] + (position - static_cast<double>(below)) * (signal[above] - signal[below]);
  double kept = 0, background = 0;
  for (std::size_t i = 0; i < scores.size(); ++i)
    if (labels[i] == 0) background += 1, kept += scores[i] >= cut ? 1 : 0;
  return kept > 0 ? background / kept : std::numeric_limits<double>::infinity();
}

inline std::vector<int> labels_of(const torch::Tensor& labels) {
  const torch::Tensor held = labels.contiguous();
  return {held.data_ptr<float>(), held.data_ptr<float>() + held.numel()};
}

struct figures {
  double auc = 0, rejection_at_50 = 0;
};

inline figures evaluate(network& model, const sample& data) {
  const std::vector<double> scores = scores_of(model, data.test_inputs);
  const std::vector<int> labels = labels_of(data.test_labels);
  return {roc_auc(scores, labels), rejection_at(scores, labels)};
}

// The order of an epoch's examples: torch.randperm with a generator seeded
// seed * 1000 + epoch, as the Python trainers draw it.
inline torch::Tensor epoch_order(std::int64_t examples, std::int64_t seed, int epoch) {
  return torch::randperm(examples,
                         at::make_generator<at::CPUGeneratorImpl>(static_cast<std::uint64_t>(seed * 1000 + epoch)),
                         torch::kLong);
}

// The model's parameters and gradients as chorus sees them: one span per
// tensor over LibTorch's own storage (the gradients made here, so that
// backward() accumulates into them in place and the spans stay valid).
struct tensors {
  std::vector<torch::Tensor> parameters;
  explicit tensors(network& model) : parameters(model.module->parameters()) {
    for (torch::Tensor& p : parameters) p.mutable_grad() = torch::zeros_like(p);
  }
  static std::span<float> span_of(const torch::Tensor& t) {
    return {t.data_ptr<float>(), static_cast<std::size_t>(t.numel())};
  }
  std::vector<std::span<float>> values() const {
    std::vector<std::span<float>> out;
    for (const torch::Tensor& p : parameters) out.push_back(span_of(p));
    return out;
  }
  std::vector<std::span<float>> gradients() const {
    std::vector<std::span<float>> out;
    for (const torch::Tensor& p : parameters) out.push_back(span_of(p.grad()));
    return out;
  }
  std::size_t size() const {
    std::size_t n = 0;
    for (const torch::Tensor& p : parameters) n += static_cast<std::size_t>(p.numel());
    return n;
  }
  void zero_gradients() {
    for (torch::Tensor& p : parameters) p.mutable_grad().zero_();
  }
  // backward() replacing a gradient tensor (rather than adding into it)
  // would leave chorus averaging a stale buffer: refuse to go on.
  void check_gradients_in_place(const std::vector<std::span<float>>& given) const {
    for (std::size_t i = 0; i < parameters.size(); ++i)
      if (parameters[i].grad().data_ptr<float>() != given[i].data())
        throw std::logic_error("a gradient moved: backward() made a new tensor instead of accumulating");
  }
  std::vector<float> flat() const {
    std::vector<float> out;
    for (const torch::Tensor& p : parameters)
      out.insert(out.end(), p.data_ptr<float>(), p.data_ptr<float>() + p.numel());
    return out;
  }
  void assign(std::span<const float> flat) {
    std::size_t at = 0;
    for (torch::Tensor& p : parameters) {
      std::copy_n(flat.begin() + static_cast<std::ptrdiff_t>(at), p.numel(), p.data_ptr<float>());
      at += static_cast<std::size_t>(p.numel());
    }
  }
};

// Who trains on what: this rank of `ranks` takes every ranks-th example of
// the epoch's order, `batch` at a time.
struct slice {
  int rank = 0, ranks = 1;
  std::int64_t batch = 128, seed = 0;
  std::int64_t steps(const sample& data) const { return data.train_labels.size(0) / ranks / batch; }
};

// One step on the examples `chosen`: the gradient (binary cross-entropy on
// the logits), then the optimiser's step, inside the scheme's step; a
// scheme that weighs workers by their samples (DiLoCo) is told how many.
template <class Scheme>
void train_step(Scheme& scheme, network& model, tensors& held, torch::optim::Optimizer& optimiser,
                const sample& data, const torch::Tensor& chosen, const std::vector<std::span<float>>& gradients) {
  scheme.begin_step();
  held.zero_gradients();
  const torch::Tensor logits = model.forward(data.train_inputs.index_select(0, chosen)).flatten();
  torch::binary_cross_entropy_with_logits(logits, data.train_labels.index_select(0, chosen)).backward();
  held.check_gradients_in_place(gradients);
  scheme.reduce_gradients();
  optimiser.step();
  if constexpr (requires { scheme.job_samples(); })
    scheme.end_step(static_cast<std::uint64_t>(chosen.size(0)));
  else
    scheme.end_step();
}

// One data-parallel epoch, a train_step per batch. Returns the examples
// this rank trained on.
template <class Scheme>
std::int64_t train_epoch(Scheme& scheme, network& model, tensors& held, torch::optim::Optimizer& optimiser,
                         const sample& data, const slice& mine, int epoch) {
  const torch::Tensor order =
      epoch_order(data.train_labels.size(0), mine.seed, epoch).slice(0, mine.rank, {}, mine.ranks);
  const std::vector<std::span<float>> gradients = held.gradients();
  for (std::int64_t step = 0; step < mine.steps(data); ++step)
    train_step(scheme, model, held, optimiser, data, order.slice(0, step * mine.batch, (step + 1) * mine.batch),
               gradients);
  return mine.steps(data) * mine.batch;
}

// Where a rank is in its passes over its slice when the epochs are the
// job's (DiLoCo's rounds by time or samples: ranks take different steps).
struct pass_cursor {
  std::int64_t pass = 0, step = 0;
};

// Batches from this rank's slice, round and round (a new order each pass),
// until the scheme's job_samples() reaches `until`. Returns the examples
// this rank trained on.
template <class Scheme>
std::int64_t train_until_job(Scheme& scheme, network& model, tensors& held, torch::optim::Optimizer& optimiser,
                             const sample& data, const slice& mine, std::uint64_t until, pass_cursor& at) {
  const std::vector<std::span<float>> gradients = held.gradients();
  std::int64_t trained = 0;
  torch::Tensor order;
  while (scheme.job_samples() < until) {
    if (at.step == mine.steps(data)) at = {at.pass + 1, 0};
    if (!order.defined() || at.step == 0)
      order = epoch_order(data.train_labels.size(0), mine.seed, 1'000'000 + static_cast<int>(at.pass))
                  .slice(0, mine.rank, {}, mine.ranks);
    train_step(scheme, model, held, optimiser, data, order.slice(0, at.step * mine.batch, (at.step + 1) * mine.batch),
               gradients);
    ++at.step;
    trained += mine.batch;
  }
  return trained;
}

}  // namespace jets
