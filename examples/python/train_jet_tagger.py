"""Trains a W-jet tagger (W vs QCD) on generate_jets.py's sample with PyTorch, data-parallel over torchrun.

    .venv/bin/python examples/python/generate_jets.py --jets 100000 --out jets.npz
    torchrun --nproc-per-node 4 examples/python/train_jet_tagger.py --data jets.npz --scheme ddp --hook int8
    torchrun --nproc-per-node 4 examples/python/train_jet_tagger.py --data jets.npz --scheme dpsgd --model deepsets

--model cnn       a small CNN on the 32x32 jet images (three 2x2-pooled convolutions, two dense layers)
--model deepsets  a deep-sets network on the leading 30 constituents (log pT, d_eta, d_phi): the same small
                  network on each, summed, then a dense head
--test-fraction F the last F of the file is held out (the file interleaves W and QCD jets, so both halves
                  are balanced); the tagger is scored on it

The options (backend, device, DDP and its hooks, the chorus schemes, slow or jittery workers, leaving) are
dataparallel.py's. Rank 0 prints, per epoch, the held-out ROC AUC and the background rejection (1 / QCD
efficiency) at 50% W efficiency of the model it holds, the wall time and the bytes its rank sent, and at the end
`final auc: 0.xxxx` and `final rejection_at_50: x` of the model to keep.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Dict, Tuple

import numpy as np
import torch

from dataparallel import DataParallel, add_arguments


def roc_auc(scores: np.ndarray, labels: np.ndarray) -> float:
    """The probability that a W jet scores above a QCD jet (ties count half): the Mann-Whitney statistic over
    the ranks of the scores, a run of equal scores sharing its mean rank."""
    order = np.argsort(scores, kind="stable")
    starts = np.r_[0, np.flatnonzero(np.diff(scores[order])) + 1]  # where each run of equal scores starts
    ends = np.r_[starts[1:], len(scores)]
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat((starts + 1 + ends) / 2.0, ends - starts)  # 1-based ranks starts+1 .. ends
    positives = labels == 1
    n_pos, n_neg = int(positives.sum()), int((~positives).sum())
    return float((ranks[positives].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def rejection_at(scores: np.ndarray, labels: np.ndarray, signal_efficiency: float = 0.5) -> float:
    """1 / (the QCD jets' efficiency) at the cut that keeps `signal_efficiency` of the W jets (inf where it keeps
    none of them)."""
    cut = np.quantile(scores[labels == 1], 1.0 - signal_efficiency)
    kept = float((scores[labels == 0] >= cut).mean())
    return 1.0 / kept if kept > 0 else float("inf")


def cnn() -> torch.nn.Module:
    torch.manual_seed(0)  # every rank starts from the same model
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 8, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(16 * 4 * 4, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))


class DeepSets(torch.nn.Module):
    """phi on each constituent, a masked sum, rho on the sum (Komiske, Metodiev and Thaler's energy flow
    networks without the energy weighting)."""

    def __init__(self) -> None:
        super().__init__()
        self.phi = torch.nn.Sequential(torch.nn.Linear(3, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64),
                                       torch.nn.ReLU())
        self.rho = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def forward(self, constituents: torch.Tensor) -> torch.Tensor:
        held = (constituents[..., :1] != 0).float()  # zero rows are padding
        return self.rho((self.phi(constituents) * held).sum(dim=1) / 10.0)


def deepsets() -> torch.nn.Module:
    torch.manual_seed(0)
    return DeepSets()


MODELS = {"cnn": cnn, "deepsets": deepsets}


def inputs_of(data: Dict[str, np.ndarray], model: str) -> np.ndarray:
    """The network's input: images scaled to order one per pixel that holds pT, or the constituents as
    (log pT, d_eta, d_phi) with padding rows kept zero."""
    if model == "cnn":
        return data["images"][:, None] * 10.0
    constituents = data["constituents"].copy()
    held = constituents[..., 0] > 0
    constituents[..., 0] = np.where(held, np.log(np.maximum(constituents[..., 0], 1e-3)) + 1.0, 0.0)
    return constituents


def split(data: Dict[str, np.ndarray], model: str, test_fraction: float) -> Tuple[np.ndarray, ...]:
    inputs, labels = inputs_of(data, model).astype(np.float32), data["labels"].astype(np.float32)
    held_out = int(round(len(labels) * test_fraction))
    train = len(labels) - held_out
    return inputs[:train], labels[:train], inputs[train:], labels[train:]


def scores_of(model: torch.nn.Module, inputs: torch.Tensor, batch: int = 4096) -> np.ndarray:
    model.eval()
    with torch.no_grad():
        scores = torch.cat([model(inputs[k:k + batch]).flatten() for k in range(0, len(inputs), batch)])
    model.train()
    return scores.cpu().numpy()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("jets.npz"), help="generate_jets.py's file")
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--scores", type=Path, default=None,
                        help="rank 0 saves the final held-out scores and labels here (.npz: ROC curves)")
    add_arguments(parser, epochs=10, batch=128, lr=0.05)
    options = parser.parse_args()
    with np.load(options.data) as file:
        data = {name: file[name] for name in ("images", "constituents", "labels")}
    train_x, train_y, test_x, test_y = split(data, options.model, options.test_fraction)

    def loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.binary_cross_entropy_with_logits(logits.flatten(), targets)

    training = DataParallel(options, f"jet tagger ({options.model})", MODELS[options.model], loss)
    device = training.device
    held_out = torch.from_numpy(test_x).to(device)

    last_scores = []

    def evaluate(model: torch.nn.Module) -> Dict[str, float]:
        scores = scores_of(model, held_out)
        last_scores[:] = [scores]
        return {"auc": roc_auc(scores, test_y), "rejection_at_50": rejection_at(scores, test_y)}

    final = training.run(torch.from_numpy(train_x).to(device), torch.from_numpy(train_y).to(device), evaluate,
                         f", {len(test_y)} jets held out")
    if final and options.scores:  # rank 0, the final model's
        np.savez(options.scores, scores=last_scores[0].astype(np.float64), labels=test_y.astype(np.uint8))


if __name__ == "__main__":
    main()
