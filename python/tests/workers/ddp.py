"""One rank of the DDP tests, under torchrun.

1. DDP on the chorus backend trains to the same parameters as DDP on Gloo
   (a Gloo group made beside it), 6 steps of SGD with momentum on an MLP:
   equal to float tolerance (1e-6 absolute, the sums' order may differ).
2. Each chorus hook (fp16, bf16, int8, onebit) on a DDP whose process group
   is Gloo's: the bucket it returns is within the codec's stated bound of
   the exact average of every rank's bucket (gathered through Gloo); the
   int8 hook on the chorus backend likewise. Error feedback keeps a residual.
   Each hook registered directly (DDP checks its annotations) gives the
   same gradients bit for bit.
3. The PowerSGD hook at rank 1 on a layer whose gradient is rank 1 on every
   rank (one input, the same everywhere; targets differ) gives the exact
   average (DDP on Gloo's), weights and biases, on either process group;
   on an MLP trained a few steps it lowers the loss, and its state keeps
   one chorus.PowerSGD per bucket.
"""

from __future__ import annotations

import copy

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus
import chorus.torch
from chorus.torch import hooks

dist.init_process_group("chorus")
rank, size = dist.get_rank(), dist.get_world_size()
gloo = dist.new_group(backend="gloo")
checks = 0


def mlp() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 33), torch.nn.ReLU(),
                               torch.nn.Linear(33, 10))


def batch(step: int) -> tuple:
    g = torch.Generator().manual_seed(1000 * step + rank)
    return torch.randn(16, 20, generator=g), torch.randint(0, 10, (16,), generator=g)


def train(model: torch.nn.Module, steps: int) -> None:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x, y = batch(step)
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()


def test_same_as_gloo() -> None:
    global checks
    on_chorus = DDP(mlp())
    on_gloo = DDP(mlp(), process_group=gloo)
    train(on_chorus, 6)
    train(on_gloo, 6)
    for a, b in zip(on_chorus.parameters(), on_gloo.parameters()):
        difference = (a - b).abs().max().item()
        assert difference <= 1e-6, f"rank {rank}: chorus and Gloo differ by {difference}"
        checks += 1
    moved = sum(p.numel() for p in on_chorus.parameters())
    assert moved > 0


def test_hook(codec: str, group) -> None:
    """One step through the hook; the returned bucket against the bound."""
    global checks
    model = DDP(mlp(), process_group=group)
    state = hooks.State(codec, process_group=group)
    seen = []

    def recording(state: hooks.State, bucket):
        contribution = bucket.buffer().clone()
        future = getattr(hooks, codec)(state, bucket)

        def compare(done):
            result = done.value()
            seen.append((contribution, result.clone()))
            return result

        return future.then(compare)

    model.register_comm_hook(state, recording)
    x, y = batch(0)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    assert seen, "the hook never ran"
    # The hook as users register it (DDP checks its annotations) gives the
    # same gradients, bit for bit, as the recorded one checked below.
    direct = DDP(mlp(), process_group=group)
    direct.register_comm_hook(hooks.State(codec, process_group=group), getattr(hooks, codec))
    torch.nn.functional.cross_entropy(direct(x), y).backward()
    for a, b in zip(model.parameters(), direct.parameters()):
        assert torch.equal(a.grad, b.grad), f"rank {rank}: the {codec} hook registered directly differs"
        checks += 1
    for contribution, result in seen:
        everyone = [torch.empty_like(contribution) for _ in range(size)]
        dist.all_gather(everyone, contribution, group=gloo)
        stacked = torch.stack(everyone).numpy()
        exact = stacked.astype(np.float64).mean(axis=0)
        bound = chorus.allreduce_error_bound(codec, stacked).astype(np.float64) / size
        error = np.abs(result.numpy().astype(np.float64) - exact)
        assert (error <= bound).all(), (f"rank {rank}: {codec} hook: error {error.max()} over its bound "
                                        f"{bound[error.argmax()]}")
        checks += 1
    if codec in ("int8", "onebit"):
        assert state._residuals and any(np.any(np.array(kept.residual()) != 0) for kept in state._residuals.values())
    try:
        hooks.fp16(hooks.State("int8", process_group=group), None)
    except ValueError as refused:
        assert "State('fp16')" in str(refused)
        checks += 1


def test_powersgd(group) -> None:
    global checks
    torch.manual_seed(7)
    layer = torch.nn.Linear(20, 12)
    exact, low_rank = DDP(copy.deepcopy(layer), process_group=gloo), DDP(copy.deepcopy(layer), process_group=group)
    state = hooks.PowerSGDState(rank=1, process_group=group)
    low_rank.register_comm_hook(state, hooks.powersgd)
    x = torch.randn(1, 20, generator=torch.Generator().manual_seed(3))  # the same input on every rank
    target = torch.randn(1, 12, generator=torch.Generator().manual_seed(100 + rank))
    for model in (exact, low_rank):
        torch.nn.functional.mse_loss(model(x), target).backward()
    for a, b in zip(exact.parameters(), low_rank.parameters()):
        difference = (a.grad - b.grad).abs().max().item()
        assert difference <= 1e-6 * (1 + a.grad.abs().max().item()), f"rank {rank}: PowerSGD off by {difference}"
        checks += 1
    assert state._states and state._states[next(iter(state._states))].compressed(0)
    # Training with it makes at least half the progress exact averaging makes.
    def losses_of(model: DDP) -> list:
        optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        x, y = batch(0)
        losses = []
        for _ in range(30):
            optimizer.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    model = DDP(mlp(), process_group=group)
    model.register_comm_hook(hooks.PowerSGDState(rank=2, process_group=group), hooks.powersgd)
    low, full = losses_of(model), losses_of(DDP(mlp(), process_group=gloo))
    assert full[0] - low[-1] > 0.5 * (full[0] - full[-1]), f"rank {rank}: PowerSGD {low[0]} -> {low[-1]}, " \
        f"exact {full[0]} -> {full[-1]}"
    checks += 1


test_same_as_gloo()
test_powersgd(gloo)
test_powersgd(None)  # DDP on the chorus backend
for codec in ("fp16", "bf16", "int8", "onebit"):
    test_hook(codec, gloo)
test_hook("int8", None)  # DDP on the chorus backend
dist.barrier()
print(f"rank {rank}: passed {checks} checks", flush=True)
dist.destroy_process_group()
