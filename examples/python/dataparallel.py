"""What the PyTorch trainers here share: data parallelism under torchrun on a torch.distributed backend, as
DDP (with chorus's compression hooks) or as one of chorus's averaging schemes around the optimiser, with
workers made slow or jittery, or leaving, on purpose. A trainer gives its model, its data and its evaluation;
this runs the epochs and prints, on rank 0, each epoch's evaluation of the model rank 0 holds (its replica;
the centre for EASGD), the wall time and the bytes its rank sent or allreduced, and at the end the evaluation
of the model to keep (after the scheme's finish(): the average, the centre or the consensus).

--device cpu|cuda       where the model and the data live (cuda: cuda:LOCAL_RANK, one GPU per rank; the chorus
                        backend then runs the collectives on NCCL and the hooks' codecs on the GPU)
--backend chorus|gloo|nccl   the torch.distributed backend (process group; nccl: torch's, on cuda)
--scheme ddp            DistributedDataParallel on that backend (with --hook fp16|bf16|int8|onebit: chorus's
                        compression hook)
--scheme allreduce|local|dpsgd|dpsgd-window|easgd-sync|easgd|gosgd|one-sided-gossip|tree-easgd|diloco|
         streaming-diloco
                        a chorus averaging scheme (chorus.averaging) around the optimiser, on the chorus
                        backend's communicator (or, with gloo, one opened through torch's store; with --device
                        cuda, on an NCCL communicator made from it: chorus.nccl). DiLoCo: --period inner steps
                        with the optimiser, then the outer step (--outer-lr, --outer-momentum, Nesterov);
                        streaming-diloco: --fragments strided fragments, each sync overlapping --overlap steps;
                        --round-seconds T or --round-samples N: rounds by compute time or by the job's samples
                        (a fast rank takes more steps), each model weighted by its samples, and the epochs are
                        the job's: an epoch ends when the job has processed the training set once
--epochs-of rank|job    job (gosgd, one-sided-gossip, easgd): the epochs are the job's, counted in the job's
                        store (chorus.averaging.JobProgress): a fast rank takes more steps than a slow one
--lr-schedule constant|cosine   the learning rate over the job's progress (DiLoCo: its job_samples; with
                        --epochs-of job: JobProgress; otherwise this rank's samples times the ranks)

--slow RANK:FACTOR (repeatable) makes that rank's steps take FACTOR times as long (a sleep of FACTOR - 1 times
its compute after each); --jitter exponential:MEAN_MS|pareto:SCALE_MS:ALPHA|lognormal:MEDIAN_MS:SIGMA adds a
heavy-tailed delay to every rank's steps; --seed S seeds the jitter and the shuffles (chorus.heterogeneity:
the same delays as the C++ trainer's). --leave RANK:EPOCH: that rank leaves on purpose after that epoch
(gosgd, easgd: its share goes to the others, who finish without it).
"""

from __future__ import annotations

import argparse
import math
import os
import time
from pathlib import Path
from typing import Callable, Dict, Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus
import chorus.torch
from chorus import averaging, heterogeneity
from chorus.torch import hooks


def add_arguments(parser: argparse.ArgumentParser, *, epochs: int, batch: int, lr: float) -> None:
    parser.add_argument("--backend", choices=["chorus", "gloo", "nccl"], default="chorus")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--scheme", choices=["ddp", *averaging.SCHEMES], default="ddp")
    parser.add_argument("--hook", choices=["none", "fp16", "bf16", "int8", "onebit"], default="none",
                        help="with --scheme ddp: chorus's compression hook")
    parser.add_argument("--codec", default=None,
                        help="with a chorus scheme: fp16, bf16, int8, fp8_e4m3, fp4_e2m1 or onebit on its messages "
                             "(DiLoCo: on its outer gradients, with error feedback)")
    parser.add_argument("--epochs", type=int, default=epochs)
    parser.add_argument("--batch", type=int, default=batch, help="per rank")
    parser.add_argument("--lr", type=float, default=lr)
    parser.add_argument("--period", type=int, default=4, help="local SGD's and DiLoCo's H")
    parser.add_argument("--outer-lr", type=float, default=0.7, help="DiLoCo's outer learning rate")
    parser.add_argument("--outer-momentum", type=float, default=0.9, help="DiLoCo's outer Nesterov momentum")
    parser.add_argument("--fragments", type=int, default=4, help="streaming-diloco's fragments")
    parser.add_argument("--overlap", type=int, default=1, help="streaming-diloco's overlapped inner steps")
    parser.add_argument("--round-seconds", type=float, default=0.0, help="DiLoCo's rounds by compute seconds")
    parser.add_argument("--round-samples", type=int, default=0, help="DiLoCo's rounds by the job's samples")
    parser.add_argument("--epochs-of", choices=["rank", "job"], default="rank",
                        help="job: an asynchronous scheme's epochs are the job's (gosgd, one-sided-gossip, easgd)")
    parser.add_argument("--lr-schedule", choices=["constant", "cosine"], default="constant",
                        help="the learning rate over the job's progress")
    parser.add_argument("--slow", action="append", default=[], metavar="RANK:FACTOR",
                        help="that rank's steps take FACTOR times as long (repeatable)")
    parser.add_argument("--jitter", default="none", help="a heavy-tailed delay after every step (see above)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the jitter and the shuffles")
    parser.add_argument("--leave", default=None, metavar="RANK:EPOCH",
                        help="that rank leaves on purpose after that epoch (gosgd, easgd)")
    parser.add_argument("--csv", default=None, help="rank 0 appends one row per epoch")


def local_device(options: argparse.Namespace) -> torch.device:
    """cuda:LOCAL_RANK (set as the current device, before the process group: one GPU per process), or the CPU."""
    if options.device != "cuda":
        return torch.device("cpu")
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)) % torch.cuda.device_count())
    torch.cuda.set_device(device)
    return device


class DataParallel:
    """One rank's training: the process group, the model (from `model_for`, the same on every rank), DDP or a
    scheme, the optimiser (SGD with Nesterov momentum), and the epochs (run)."""

    def __init__(self, options: argparse.Namespace, name: str, model_for: Callable[[], torch.nn.Module],
                 loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> None:
        self.options, self.name, self.model_for, self.loss = options, name, model_for, loss
        self.device = local_device(options)
        dist.init_process_group(options.backend)
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.delays = heterogeneity.StepDelays(self.rank, self.size, options.slow, options.jitter, options.seed)
        self.leave_rank, self.leave_epoch = -1, 0
        if options.leave:
            self.leave_rank, self.leave_epoch = (int(part) for part in options.leave.split(":"))
            if options.scheme not in ("gosgd", "easgd") or not 0 < self.leave_rank < self.size:
                raise SystemExit("--leave RANK:EPOCH: a rank other than 0 (it reports), with gosgd or easgd")
        self.samples = 0
        self.passes, self.pending = 0, []  # epochs by the job's samples: this rank's passes over its slice
        self.model = model_for().to(self.device)
        self.scheme: Optional[averaging.Scheme] = None
        self.progress: Optional[averaging.JobProgress] = None  # --epochs-of job
        self.reduced_bytes = 0
        elements = sum(p.numel() for p in self.model.parameters())
        # What DDP hands to its allreduce each step: the gradients, encoded by the hook's codec if any.
        self.gradient_bytes = (4 * elements if options.hook == "none"
                               else chorus.Codec(options.hook).encoded_bytes(elements))
        sgd = torch.optim.SGD(self.model.parameters(), lr=options.lr, momentum=0.9, nesterov=True)
        if options.scheme == "ddp":
            self.net = DDP(self.model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
            if options.hook != "none":
                state = hooks.State(options.hook)
                self.net.register_comm_hook(state, getattr(hooks, options.hook))
            self.optimizer = sgd
        else:
            self.net = self.model
            self.comm = chorus.torch.communicator_for()
            # On GPUs the schemes run on an NCCL communicator made from it (D-PSGD mixes on the device).
            self.scheme_comm = chorus.nccl.connect(self.comm) if self.device.type == "cuda" else self.comm
            self.scheme = self.make_scheme()
            if options.epochs_of == "job":
                if options.scheme not in ("gosgd", "one-sided-gossip", "easgd"):
                    raise SystemExit("--epochs-of job: with gosgd, one-sided-gossip or easgd (DiLoCo counts the job's "
                                     "samples with --round-seconds or --round-samples)")
                self.progress = averaging.JobProgress(self.comm, "dataparallel")
            self.optimizer = averaging.Averaged(sgd, self.scheme)

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
        if o.scheme in ("diloco", "streaming-diloco"):
            streaming = o.scheme == "streaming-diloco"
            tensors = len(list(self.model.parameters()))
            return averaging.DiLoCo(comm, params, period=o.period, round_seconds=o.round_seconds,
                                    round_samples=o.round_samples, outer_lr=o.outer_lr,
                                    outer_momentum=o.outer_momentum, codec=o.codec,
                                    fragments=min(o.fragments, tensors) if streaming else 1,
                                    overlap_steps=min(o.overlap, o.period - 1) if streaming else 0)
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

    def by_job(self) -> bool:
        """Whether the epochs are the job's (DiLoCo's rounds by time or samples): ranks take different steps."""
        if self.progress is not None:
            return True
        return isinstance(self.scheme, averaging.DiLoCo) and (self.options.round_seconds > 0
                                                              or self.options.round_samples > 0)

    def job_samples(self) -> int:
        """The job's samples so far: DiLoCo's count (the same on every rank), else this rank's times the ranks."""
        if isinstance(self.scheme, averaging.DiLoCo):
            return self.scheme.job_samples
        if self.progress is not None:
            return self.progress.samples
        return self.samples * self.size

    def epoch(self, number: int, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        """One pass over this rank's slice of the shuffled training set (the same step count on every rank); by
        the job's samples: batches from this rank's slice, round and round, until the job has processed the
        training set number + 1 times."""
        self.net.train()
        if not self.by_job():
            for chosen in self.batches(number, inputs):
                self.train_step(inputs, targets, chosen, len(targets))
            return
        while self.job_samples() < (number + 1) * len(targets):
            if not self.pending:
                self.passes += 1
                self.pending = list(self.batches(1_000_000 + self.passes, inputs))
            self.train_step(inputs, targets, self.pending.pop(0), len(targets))

    def batches(self, shuffle: int, inputs: torch.Tensor) -> list:
        order = torch.randperm(len(inputs), generator=torch.Generator().manual_seed(self.options.seed * 1000 + shuffle))
        mine = order[self.rank::self.size].to(self.device)
        steps = len(order) // self.size // self.options.batch
        return [mine[step * self.options.batch:(step + 1) * self.options.batch] for step in range(steps)]

    def train_step(self, inputs: torch.Tensor, targets: torch.Tensor, chosen: torch.Tensor, epoch_samples: int) -> None:
        if self.options.lr_schedule == "cosine":
            progress = min(1.0, self.job_samples() / (self.options.epochs * epoch_samples))
            for group in self.optimizer.param_groups:
                group["lr"] = self.options.lr * 0.5 * (1.0 + math.cos(math.pi * progress))
        self.optimizer.zero_grad()
        with self.delays.step():
            self.loss(self.net(inputs[chosen]), targets[chosen]).backward()
        if isinstance(self.scheme, averaging.DiLoCo):
            self.optimizer.step(samples=len(chosen))
        else:
            self.optimizer.step()
        self.samples += len(chosen)
        if self.scheme is None:
            self.reduced_bytes += self.gradient_bytes
        elif self.progress is not None:
            self.progress.add(len(chosen))

    def held_model(self) -> torch.nn.Module:
        """Rank 0's view after an epoch, without a collective (an asynchronous scheme's peers may still be
        mid-step): the centre for EASGD (the server's, rank 0, for the asynchronous one), else its replica."""
        if isinstance(self.scheme, (averaging.EASGD, averaging.EASGDAsync)):
            held = self.model_for().to(self.device)
            torch.nn.utils.vector_to_parameters(torch.from_numpy(self.scheme.centre()).to(self.device),
                                                held.parameters())
            return held
        return self.model

    def run(self, inputs: torch.Tensor, targets: torch.Tensor,
            evaluate: Callable[[torch.nn.Module], Dict[str, float]], steps_note: str = "") -> Dict[str, float]:
        """Every epoch, then finish(); returns the final evaluation (rank 0's; on the others, {}). `evaluate`
        maps a model to named figures ("test accuracy", "auc", ...), printed in that order."""
        started = time.monotonic()
        o = self.options
        label = o.scheme + (f"/{o.hook}" if o.scheme == "ddp" else "") + (f"/{o.codec}" if o.codec else "")
        if self.rank == 0:
            print(f"{self.name}: {self.size} ranks, backend {o.backend}, scheme {label}, {o.epochs} epochs of "
                  f"{len(targets) // self.size // o.batch} steps{steps_note}", flush=True)
        for number in range(o.epochs):
            self.epoch(number, inputs, targets)
            if self.rank == 0:
                figures = evaluate(self.held_model())
                wall = time.monotonic() - started
                shown = ", ".join(f"{name} {value:.4f}" for name, value in figures.items())
                print(f"epoch {number + 1}: {shown}, wall {wall:.1f} s, {self.traffic()}", flush=True)
                if o.csv:
                    self.append_csv(number + 1, wall, figures)
            if self.rank == self.leave_rank and number + 1 == self.leave_epoch:
                self.scheme.leave()
                print(f"rank {self.rank}: left on purpose after epoch {number + 1}", flush=True)
                dist.destroy_process_group()
                return {}
        trained = time.monotonic() - started
        print(f"rank {self.rank}: {self.samples} samples in {trained:.1f} s, {self.samples / trained:.0f} samples/s, "
              f"slept {self.delays.slept_seconds:.1f} s (slowdown {self.delays.factor:.1f}x)", flush=True)
        if self.scheme is not None:
            self.scheme.finish()
        final = evaluate(self.model) if self.rank == 0 else {}
        for name, value in final.items():
            print(f"final {name}: {value:.4f}", flush=True)
        dist.destroy_process_group()
        return final

    def append_csv(self, epoch: int, wall: float, figures: Dict[str, float]) -> None:
        o = self.options
        fresh = not Path(o.csv).exists()
        with open(o.csv, "a") as out:
            if fresh:  # bytes_rank0: sent (a scheme) or allreduced (DDP)
                out.write("backend,scheme,hook,codec,ranks,epoch,wall_s,"
                          + ",".join(name.replace(" ", "_") for name in figures) + ",bytes_rank0\n")
            out.write(f"{o.backend},{o.scheme},{o.hook},{o.codec or 'none'},{self.size},{epoch},{wall:.2f},"
                      + ",".join(f"{value:.4f}" for value in figures.values()) + f",{self.bytes_counted()}\n")
