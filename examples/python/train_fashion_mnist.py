"""Trains an MLP on Fashion-MNIST with PyTorch, data-parallel over torchrun.

    torchrun --nproc-per-node 4 examples/python/train_fashion_mnist.py --backend chorus --scheme ddp
    torchrun --nproc-per-node 4 examples/python/train_fashion_mnist.py --scheme dpsgd --codec fp16
    torchrun --nproc-per-node 4 examples/python/train_fashion_mnist.py --device cuda --hook int8

The options (backend, device, DDP and its hooks, the chorus schemes, slow
or jittery workers, leaving) are dataparallel.py's.

The data are the Debian package dataset-fashion-mnist's IDX files
(/usr/share/datasets/fashion-mnist), read with NumPy; nothing is downloaded.
Each rank trains on its own slice of the shuffled training set. Rank 0
prints, per epoch, the test accuracy of the model it holds (its replica; the
centre for EASGD), the wall time and the bytes its rank sent, and at the end
`final test accuracy: 0.xxxx` of the model to keep (after the scheme's
finish(): the average, the centre or the consensus).
"""

from __future__ import annotations

import argparse
import gzip
import os
from pathlib import Path

import numpy as np
import torch

from dataparallel import DataParallel, add_arguments

DATA = Path(os.environ.get("FASHION_MNIST_DIR", "/usr/share/datasets/fashion-mnist"))


def read_idx(name: str) -> np.ndarray:
    with gzip.open(DATA / name, "rb") as file:
        raw = file.read()
    dimensions = raw[3]
    shape = tuple(int.from_bytes(raw[4 + 4 * k:8 + 4 * k], "big") for k in range(dimensions))
    return np.frombuffer(raw, np.uint8, offset=4 + 4 * dimensions).reshape(shape)


def load(prefix: str) -> tuple:
    images = read_idx(f"{prefix}-images-idx3-ubyte.gz").reshape(-1, 784).astype(np.float32) / 255.0
    labels = read_idx(f"{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    return torch.from_numpy((images - 0.2860) / 0.3530), torch.from_numpy(labels)


def model_for() -> torch.nn.Module:
    torch.manual_seed(0)  # every rank starts from the same model
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                               torch.nn.ReLU(), torch.nn.Linear(128, 10))


def accuracy(model: torch.nn.Module, images: torch.Tensor, labels: torch.Tensor) -> float:
    with torch.no_grad():
        return (model(images).argmax(dim=1) == labels).float().mean().item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(parser, epochs=8, batch=64, lr=0.05)
    options = parser.parse_args()
    training = DataParallel(options, "fashion-mnist", model_for, torch.nn.functional.cross_entropy)
    train_images, train_labels = (t.to(training.device) for t in load("train"))
    test_images, test_labels = (t.to(training.device) for t in load("t10k"))
    training.run(train_images, train_labels,
                 lambda model: {"test accuracy": accuracy(model, test_images, test_labels)})


if __name__ == "__main__":
    main()
