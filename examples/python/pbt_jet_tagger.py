"""Hyper-parameter search for the W-jet tagger as a second level of parallelism: the ranks are split into
members (chorus's comm.split), each member trains one tagger data-parallel over its ranks (allreduce-SGD), and

  --mode pbt     population-based training: every --exploit-every epochs the members are ranked by held-out
                 AUC; each member in the bottom quarter (at least one) copies the weights and the optimiser's
                 momentum of one in the top quarter (point-to-point between the members' first ranks, then a
                 broadcast inside the member) and perturbs the copied learning rate (x0.8 or x1.25) and
                 momentum (+-0.05)
  --mode random  a plain parallel random search: the same members and starting draws, never exploited

    build/tools/chorus-run -n 8 .venv/bin/python examples/python/pbt_jet_tagger.py --data jets.npz --members 4
    build/tools/chorus-run -n 8 .venv/bin/python examples/python/pbt_jet_tagger.py --data jets.npz --members 4 \
        --mode random

Each member starts from the same model with a learning rate drawn log-uniformly in [1e-3, 0.3] and a momentum
uniformly in [0.5, 0.99] (seeded by --seed: the same draws in both modes, so they compare at equal compute).
Rank 0 prints each member's AUC, learning rate and momentum after every epoch, and what was copied; --csv
writes those rows, --plot draws each member's AUC over the epochs. --dump FILE writes, on rank 0, every rank's
member, parameters and momentum after the last epoch (the test of the exploit step reads it).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Dict, List

import numpy as np
import torch

import chorus
from chorus import averaging
from train_jet_tagger import MODELS, rejection_at, roc_auc, scores_of, split

EXPLOIT_TAG = 7001  # the world communicator's tag for the copies between members


def draw(seed: int, member: int) -> Dict[str, float]:
    rng = np.random.default_rng([seed, member])
    return {"lr": float(np.exp(rng.uniform(np.log(1e-3), np.log(0.3)))), "momentum": float(rng.uniform(0.5, 0.99))}


def perturbed(hyper: Dict[str, float], seed: int, epoch: int, member: int) -> Dict[str, float]:
    rng = np.random.default_rng([seed, epoch, member, 1])
    return {"lr": hyper["lr"] * float(rng.choice([0.8, 1.25])),
            "momentum": float(np.clip(hyper["momentum"] + rng.choice([-0.05, 0.05]), 0.5, 0.99))}


class Member:
    """This rank's share of one member: its model, optimiser and scheme on the member's communicator."""

    def __init__(self, options: argparse.Namespace, comm: chorus.Communicator, index: int) -> None:
        self.options, self.comm, self.index = options, comm, index
        self.hyper = draw(options.seed, index)
        self.model = MODELS[options.model]()
        self.sgd = torch.optim.SGD(self.model.parameters(), lr=self.hyper["lr"], momentum=self.hyper["momentum"])
        for group in self.sgd.param_groups:  # the momentum buffers exist from the start: an exploit copies them
            for p in group["params"]:
                self.sgd.state[p]["momentum_buffer"] = torch.zeros_like(p)
        self.optimizer = averaging.Averaged(self.sgd, averaging.AllreduceSGD(comm, self.model.parameters()))

    def epoch(self, number: int, inputs: torch.Tensor, targets: torch.Tensor) -> None:
        o = self.options
        order = torch.randperm(len(targets), generator=torch.Generator().manual_seed(o.seed * 1000 + number))
        mine = order[self.comm.rank::self.comm.size]
        for step in range(len(order) // self.comm.size // o.batch):
            chosen = mine[step * o.batch:(step + 1) * o.batch]
            self.optimizer.zero_grad()
            torch.nn.functional.binary_cross_entropy_with_logits(self.model(inputs[chosen]).flatten(),
                                                                 targets[chosen]).backward()
            self.optimizer.step()

    def state(self) -> torch.Tensor:
        """The weights and the momentum, one flat float32 vector."""
        momentum = [self.sgd.state[p]["momentum_buffer"] for p in self.model.parameters()]
        return torch.cat([torch.nn.utils.parameters_to_vector(self.model.parameters()),
                          torch.nn.utils.parameters_to_vector(momentum)]).detach().clone()

    def load(self, state: torch.Tensor, hyper: Dict[str, float]) -> None:
        half = len(state) // 2
        with torch.no_grad():
            torch.nn.utils.vector_to_parameters(state[:half], self.model.parameters())
            offset = half
            for p in self.model.parameters():
                self.sgd.state[p]["momentum_buffer"].copy_(state[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        self.hyper = dict(hyper)
        for group in self.sgd.param_groups:
            group["lr"], group["momentum"] = hyper["lr"], hyper["momentum"]


def exploit(world: chorus.Communicator, member: Member, leaders: List[int], aucs: np.ndarray,
            hypers: List[Dict[str, float]], epoch: int, seed: int) -> Dict[int, int]:
    """The bottom quarter copies the top quarter (every rank decides the same from the gathered AUCs);
    returns {copier: source}."""
    ranked = list(np.argsort(-aucs, kind="stable"))
    quarter = max(1, len(ranked) // 4)
    copies = {int(worst): int(best) for best, worst in zip(ranked[:quarter], ranked[::-1][:quarter])
              if worst != best}
    state = member.state()
    me = member.index
    if member.comm.rank == 0:
        for copier, source in copies.items():
            if source == me:
                world.send(state, leaders[copier], EXPLOIT_TAG)
        if me in copies:
            world.recv(state, leaders[copies[me]], EXPLOIT_TAG)
    if me in copies:
        member.comm.broadcast(state, 0)
        member.load(state, perturbed(hypers[copies[me]], seed, epoch, me))
    return copies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=Path("jets.npz"))
    parser.add_argument("--model", choices=sorted(MODELS), default="cnn")
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--mode", choices=["pbt", "random"], default="pbt")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--exploit-every", type=int, default=2)
    parser.add_argument("--batch", type=int, default=128, help="per rank")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--csv", default=None)
    parser.add_argument("--plot", default=None)
    parser.add_argument("--dump", default=None)
    options = parser.parse_args()
    world = chorus.init()
    if not 0 < options.members <= world.size:
        raise SystemExit(f"--members: 1 to the {world.size} ranks")
    index = world.rank % options.members
    comm = world.split(index, world.rank)
    leaders = [m for m in range(options.members)]  # each member's first rank: world rank m
    with np.load(options.data) as file:
        data = {name: file[name] for name in ("images", "constituents", "labels")}
    train_x, train_y, test_x, test_y = (torch.from_numpy(a) for a in split(data, options.model,
                                                                          options.test_fraction))
    member = Member(options, comm, index)
    started, rows = time.monotonic(), []
    for epoch in range(1, options.epochs + 1):
        member.epoch(epoch, train_x, train_y.float())
        scores = scores_of(member.model, test_x)
        mine = np.array([roc_auc(scores, test_y.numpy()), rejection_at(scores, test_y.numpy()),
                         member.hyper["lr"], member.hyper["momentum"]])
        everyone = world.allgather(mine)[leaders]  # one row per member (its ranks agree)
        aucs = everyone[:, 0]
        hypers = [{"lr": float(r[2]), "momentum": float(r[3])} for r in everyone]
        copies = {}
        if options.mode == "pbt" and epoch % options.exploit_every == 0:
            copies = exploit(world, member, leaders, aucs, hypers, epoch, options.seed)
        if world.rank == 0:
            wall = time.monotonic() - started
            for m, row in enumerate(everyone):
                note = ""
                if m in copies:
                    now = perturbed(hypers[copies[m]], options.seed, epoch, m)
                    note = f", then copies member {copies[m]} (lr {now['lr']:.4g}, momentum {now['momentum']:.3f})"
                print(f"epoch {epoch}: member {m}: auc {row[0]:.4f}, rejection_at_50 {row[1]:.1f}, "
                      f"lr {row[2]:.4g}, momentum {row[3]:.3f}{note}", flush=True)
                rows.append((options.mode, epoch, wall, m, *row, copies.get(m, -1)))
    best = int(np.argmax(aucs))
    if world.rank == 0:
        print(f"{options.mode}: best member {best}: auc {aucs[best]:.4f}, lr {hypers[best]['lr']:.4g}, momentum "
              f"{hypers[best]['momentum']:.3f}, {time.monotonic() - started:.1f} s", flush=True)
    if options.dump:
        states = world.gather(member.state().numpy(), 0)
        members = world.gather(np.array([index], np.int64), 0)
        if world.rank == 0:
            np.savez(options.dump, states=states, members=members[:, 0])
    if world.rank == 0 and options.csv:
        write_csv(options.csv, rows)
    if world.rank == 0 and options.plot:
        plot(options.plot, rows, options)
    world.close()


def write_csv(path: str, rows: list) -> None:
    fresh = not Path(path).exists()
    with open(path, "a") as out:
        if fresh:
            out.write("mode,epoch,wall_s,member,auc,rejection_at_50,lr,momentum,copied_from\n")
        for mode, epoch, wall, member, auc, rejection, lr, momentum, source in rows:
            out.write(f"{mode},{epoch},{wall:.2f},{member},{auc:.4f},{rejection:.2f},{lr:.6g},{momentum:.4f},"
                      f"{source}\n")


def plot(path: str, rows: list, options: argparse.Namespace) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(7, 4))
    for m in range(options.members):
        mine = [r for r in rows if r[3] == m]
        axis.plot([r[1] for r in mine], [r[4] for r in mine], marker="o",
                  label=f"member {m} (lr {mine[-1][6]:.3g}, momentum {mine[-1][7]:.2f})")
        for r in mine:
            if r[8] >= 0:
                axis.annotate(f"<- {r[8]}", (r[1], r[4]), fontsize=7)
    axis.set_xlabel("epoch")
    axis.set_ylabel("held-out AUC")
    axis.set_title(f"{options.mode}: {options.members} members")
    axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
