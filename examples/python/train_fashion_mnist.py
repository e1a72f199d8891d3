"""Trains an MLP on Fashion-MNIST with PyTorch, data-parallel over torchrun.

    torchrun --nproc-per-node 4 examples/python/train_fashion_mnist.py --backend chorus --scheme ddp
    torchrun --nproc-per-node 4 examples/python/train_fashion_mnist.py --scheme dpsgd --codec fp16
    torchrun --nproc-per-node 4 examples/python/train_fashion_mnist.py --device cuda --hook int8

--device cpu|cuda       where the model and the data live (cuda: cuda:LOCAL_RANK, one GPU per rank;
                        the chorus backend then runs the collectives on NCCL and the hooks' codecs
                        on the GPU)
--backend chorus|gloo|nccl   the torch.distributed backend (process group; nccl: torch's, on cuda)
--scheme ddp            DistributedDataParallel on that backend (with --hook fp16|bf16|int8|onebit:
                        chorus's compression hook)
--scheme allreduce|local|dpsgd|dpsgd-window|easgd-sync|easgd|gosgd|one-sided-gossip
                        a chorus averaging scheme (chorus.averaging) around the optimiser, on the
                        chorus backend's communicator (or, with gloo, one opened through torch's store;
                        with --device cuda, on an NCCL communicator made from it: chorus.nccl)

--slow RANK:FACTOR (repeatable) makes that rank's steps take FACTOR times as long (a sleep of
FACTOR - 1 times its compute after each); --jitter exponential:MEAN_MS|pareto:SCALE_MS:ALPHA|
lognormal:MEDIAN_MS:SIGMA adds a heavy-tailed delay to every rank's steps; --seed S seeds the
jitter and the shuffles (chorus.heterogeneity: the same delays as the C++ trainer's).
--leave RANK:EPOCH: that rank leaves on purpose after that epoch (gosgd, easgd: its share goes to
the others, who finish without it).

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
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus
import chorus.torch
from chorus import averaging, heterogeneity
from chorus.torch import hooks

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


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=["chorus", "gloo", "nccl"], default="chorus")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--scheme", choices=["ddp", *averaging.SCHEMES], default="ddp")
    parser.add_argument("--hook", choices=["none", "fp16", "bf16", "int8", "onebit"], default="none",
                        help="with --scheme ddp: chorus's compression hook")
    parser.add_argument("--codec", default=None, help="with a chorus scheme: fp16, bf16, int8 or onebit on its messages")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64, help="per rank")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--period", type=int, default=4, help="local SGD's H")
    parser.add_argument("--slow", action="append", default=[], metavar="RANK:FACTOR",
                        help="that rank's steps take FACTOR times as long (repeatable)")
    parser.add_argument("--jitter", default="none", help="a heavy-tailed delay after every step (see above)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the jitter and the shuffles")
    parser.add_argument("--leave", default=None, metavar="RANK:EPOCH",
                        help="that rank leaves on purpose after that epoch (gosgd, easgd)")
    parser.add_argument("--csv", default=None, help="rank 0 appends one row per epoch")
    return parser.parse_args()


class Trainer:
    def __init__(self, options: argparse.Namespace) -> None:
        self.options = options
        self.device = torch.device("cpu")
        if options.device == "cuda":
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
            torch.cuda.set_device(self.device)  # before the process group: one GPU per process
        dist.init_process_group(options.backend)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.delays = heterogeneity.StepDelays(self.rank, self.size, options.slow, options.jitter, options.seed)
        self.leave_rank, self.leave_epoch = -1, 0
        if options.leave:
            self.leave_rank, self.leave_epoch = (int(part) for part in options.leave.split(":"))
            if options.scheme not in ("gosgd", "easgd") or not 0 < self.leave_rank < self.size:
                raise SystemExit("--leave RANK:EPOCH: a rank other than 0 (it reports), with gosgd or easgd")
        self.samples = 0
        self.train_images, self.train_labels = (t.to(self.device) for t in load("train"))
        self.test_images, self.test_labels = (t.to(self.device) for t in load("t10k"))
        self.model = model_for().to(self.device)
        self.comm = None
        self.scheme = None
        self.reduced_bytes = 0
        elements = sum(p.numel() for p in self.model.parameters())
        # What DDP hands to its allreduce each step: the gradients, encoded by the hook's codec if any.
        self.gradient_bytes = 4 * elements if options.hook == "none" else chorus.Codec(options.hook).encoded_bytes(elements)
        if options.scheme == "ddp":
            self.net = DDP(self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
            if options.hook != "none":
                state = hooks.State(options.hook)
                self.net.register_comm_hook(state, getattr(hooks, options.hook))
            optimizer = torch.optim.SGD(self.model.parameters(), lr=options.lr, momentum=0.9, nesterov=True)
            self.optimizer = optimizer
        else:
            self.net = self.model
            self.comm = chorus.torch.communicator_for()
            # On GPUs the schemes run on an NCCL communicator made from it (D-PSGD mixes on the device).
            self.scheme_comm = chorus.nccl.connect(self.comm) if self.device.type == "cuda" else self.comm
            self.scheme = self.make_scheme()
            self.optimizer = averaging.Averaged(
                torch.optim.SGD(self.model.parameters(), lr=options.lr, momentum=0.9, nesterov=True), self.scheme)

    def make_scheme(self) -> averaging.Scheme:
        o, params, comm = self.options, self.model.parameters(), self.scheme_comm
        if o.scheme == "allreduce":
            return averaging.AllreduceSGD(comm, params, codec=o.codec)
        if o.scheme == "local":
            return averaging.LocalSGD(comm, params, period=o.period, codec=o.codec)
        if o.scheme in ("dpsgd", "dpsgd-window"):
            return averaging.DPSGD(comm, params, codec=o.codec, one_sided=o.scheme == "dpsgd-window")
        if o.scheme == "one-sided-gossip":
            return averaging.OneSidedGossip(comm, params, codec=o.codec)
        if o.scheme == "easgd-sync":
            return averaging.EASGD(comm, params, alpha=0.1, tau=1, codec=o.codec)
        if o.scheme == "easgd":
            return averaging.EASGDAsync(comm, params, alpha=0.1, tau=4)
        if o.scheme == "tree-easgd":
            return averaging.TreeEASGD(comm, params, alpha=0.1, tau_up=4, tau_down=4)
        return averaging.GoSGD(comm, params, push_probability=0.5, codec=o.codec)

    def traffic(self) -> str:
        """A chorus scheme counts the bytes this rank sent; for DDP, the bytes it allreduced."""
        if self.scheme is not None:
            return f"sent {self.scheme.stats['bytes_sent'] / 1e6:.1f} MB"
        return f"allreduced {self.reduced_bytes / 1e6:.1f} MB"

    def bytes_counted(self) -> int:
        return self.scheme.stats["bytes_sent"] if self.scheme is not None else self.reduced_bytes

    def epoch(self, number: int) -> None:
        order = torch.randperm(len(self.train_labels),
                               generator=torch.Generator().manual_seed(self.options.seed * 1000 + number))
        mine = order[self.rank::self.size].to(self.device)
        steps = len(mine) // self.options.batch  # the same count on every rank
        self.net.train()
        for step in range(steps):
            chosen = mine[step * self.options.batch:(step + 1) * self.options.batch]
            self.optimizer.zero_grad()
            with self.delays.step():
                loss = torch.nn.functional.cross_entropy(self.net(self.train_images[chosen]),
                                                         self.train_labels[chosen])
                loss.backward()
            self.optimizer.step()
            self.samples += len(chosen)
            if self.scheme is None:
                self.reduced_bytes += self.gradient_bytes
    def held_model_accuracy(self) -> float:
        """Rank 0's view after an epoch, without a collective (an asynchronous
        scheme's peers may still be mid-step): the centre for EASGD (the
        server's, rank 0, for the asynchronous one), else rank 0's replica.
        The model to keep, after finish(), is the final line."""
        if self.rank != 0:
            return float("nan")
        if isinstance(self.scheme, (averaging.EASGD, averaging.EASGDAsync)):
            centre = torch.from_numpy(self.scheme.centre()).to(self.device)
            held = model_for().to(self.device)
            torch.nn.utils.vector_to_parameters(centre, held.parameters())
            return accuracy(held, self.test_images, self.test_labels)
        return accuracy(self.model, self.test_images, self.test_labels)

    def run(self) -> None:
        started = time.monotonic()
        label = self.options.scheme + (f"/{self.options.hook}" if self.options.scheme == "ddp" else "") + \
            (f"/{self.options.codec}" if self.options.codec else "")
        if self.rank == 0:
            print(f"fashion-mnist: {self.size} ranks, backend {self.options.backend}, scheme {label}, "
                  f"{self.options.epochs} epochs of {len(self.train_labels) // self.size // self.options.batch} "
                  f"steps", flush=True)
        for number in range(self.options.epochs):
            self.epoch(number)
            held = self.held_model_accuracy()
            if self.rank == 0:
                wall = time.monotonic() - started
                print(f"epoch {number + 1}: test accuracy {held:.4f}, wall {wall:.1f} s, {self.traffic()}", flush=True)
                if self.options.csv:
                    self.append_csv(number + 1, wall, held)
            if self.rank == self.leave_rank and number + 1 == self.leave_epoch:
                self.scheme.leave()
                print(f"rank {self.rank}: left on purpose after epoch {number + 1}", flush=True)
                dist.destroy_process_group()
                return
        trained = time.monotonic() - started
        print(f"rank {self.rank}: {self.samples} samples in {trained:.1f} s, {self.samples / trained:.0f} samples/s, "
              f"slept {self.delays.slept_seconds:.1f} s (slowdown {self.delays.factor:.1f}x)", flush=True)
        if self.scheme is not None:
            self.scheme.finish()
        final = accuracy(self.model, self.test_images, self.test_labels)
        if self.rank == 0:
            print(f"final test accuracy: {final:.4f}", flush=True)
        dist.destroy_process_group()

    def append_csv(self, epoch: int, wall: float, held: float) -> None:
        fresh = not Path(self.options.csv).exists()
        with open(self.options.csv, "a") as out:
            if fresh:
                out.write("backend,scheme,hook,codec,ranks,epoch,wall_s,test_accuracy,bytes_rank0\n")  # sent or allreduced
            out.write(f"{self.options.backend},{self.options.scheme},{self.options.hook},{self.options.codec or 'none'},"
                      f"{self.size},{epoch},{wall:.2f},{held:.4f},{self.bytes_counted()}\n")


if __name__ == "__main__":
    Trainer(parse()).run()
