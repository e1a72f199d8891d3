"""One rank of the real-GPU torch-backend tests, under torchrun: the chorus
backend as argv[1] names it ("chorus", "cpu:chorus,cuda:chorus" or
"cpu:gloo,cuda:chorus") on CUDA tensors, every rank on cuda:LOCAL_RANK
(modulo the GPUs there).

1. Every collective on CUDA tensors against NumPy references of every
   rank's inputs (each rank makes them all from seeds), the bitwise ops
   NCCL lacks among them; a CPU tensor on the same group still works.
2. Work as torch's NCCL backend's: wait() makes the current stream wait and
   does not block the host (behind a one-second kernel the Work is still
   not completed after it), synchronize() and wait(timeout) do; a side
   stream's call is ordered on that stream; a wait(timeout) shorter than
   the kernel ahead is a chorus.TimeoutError that is also torch's
   DistBackendError.
3. batch_isend_irecv around the ring (and a blocking send/recv pair).
4. DDP on CUDA: three SGD steps on the chorus group give the parameters of
   one process stepping on the mean of every rank's gradient; each codec
   hook's bucket is within the codec's bound of the exact average, and
   PowerSGD at rank 1 is exact on a rank-1 gradient.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus
import chorus.torch
from checking import check, checks, counted, data, reference
from chorus.torch import hooks

backend = sys.argv[1]
dist.init_process_group(backend)
rank, size = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())
torch.cuda.set_device(device)
ONE_SECOND = 2_000_000_000  # cycles for torch.cuda._sleep: a second or more on a GPU clocked at 2 GHz or less


def gpu(values: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(values.copy()).to(device)


def host(tensor: torch.Tensor) -> np.ndarray:
    return tensor.cpu().numpy()


# -- 1. collectives ---------------------------------------------------------
OPS = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG, "band": dist.ReduceOp.BAND}
for dtype in (np.float32, np.float16, np.int64, np.uint8):
    for count in (0, 1, 7, 1 << 20):
        inputs = [data(r, dtype, count) for r in range(size)]
        for op in ("sum", "max") + (("avg",) if dtype in (np.float32, np.float16) else ("band",)):
            mine = gpu(inputs[rank])
            dist.all_reduce(mine, OPS[op])
            check(f"all_reduce {np.dtype(dtype).name} x{count} {op}", host(mine), reference(op, inputs, dtype, size))

inputs = [data(r, np.float32, 4097, 1) for r in range(size)]
mine = gpu(inputs[rank])
dist.broadcast(mine, size - 1)
check("broadcast", host(mine), inputs[size - 1])
parts = [torch.empty(4097, device=device) for _ in range(size)]
dist.all_gather(parts, gpu(inputs[rank]))
check("all_gather", np.stack([host(p) for p in parts]), np.stack(inputs))
whole = torch.empty(size * 4097, device=device)
dist.all_gather_into_tensor(whole, gpu(inputs[rank]))
check("all_gather_into_tensor", host(whole), np.concatenate(inputs))
blocks = [data(r, np.float32, 5 * size + 0, 2) for r in range(size)]
summed = reference("sum", blocks, np.float32, size)
out = torch.empty(5, device=device)
dist.reduce_scatter_tensor(out, gpu(blocks[rank]))
check("reduce_scatter_tensor", host(out), summed[rank * 5:(rank + 1) * 5])
out = torch.empty(5, device=device)
dist.reduce_scatter(out, list(gpu(blocks[rank]).split(5)))
check("reduce_scatter", host(out), summed[rank * 5:(rank + 1) * 5])
out = torch.empty(5 * size, device=device)
dist.all_to_all_single(out, gpu(blocks[rank]))
check("all_to_all_single", host(out), np.concatenate([blocks[r][rank * 5:(rank + 1) * 5] for r in range(size)]))
# Uneven: rank r sends r + j + 1 elements to rank j.
sent = [data(r, np.float32, sum(r + j + 1 for j in range(size)), 3) for r in range(size)]
out = torch.empty(sum(r + rank + 1 for r in range(size)), device=device)
dist.all_to_all_single(out, gpu(sent[rank]), [r + rank + 1 for r in range(size)],
                       [rank + j + 1 for j in range(size)])
expected = [sent[r][sum(r + j + 1 for j in range(rank)):][:r + rank + 1] for r in range(size)]
check("all_to_all_single, uneven", host(out), np.concatenate(expected))
mine = gpu(inputs[rank])
dist.reduce(mine, 0)
if rank == 0:
    check("reduce", host(mine), reference("sum", inputs, np.float32, size))
gathered = [torch.empty(4097, device=device) for _ in range(size)] if rank == 0 else None
dist.gather(gpu(inputs[rank]), gathered, 0)
if rank == 0:
    check("gather", np.stack([host(g) for g in gathered]), np.stack(inputs))
out = torch.empty(4097, device=device)
dist.scatter(out, [gpu(inputs[r]) for r in range(size)] if rank == size - 1 else None, size - 1)
check("scatter", host(out), inputs[rank])
dist.barrier()
on_cpu = torch.from_numpy(inputs[rank].copy())
dist.all_reduce(on_cpu)
check(f"all_reduce of a CPU tensor on {backend}", on_cpu.numpy(), reference("sum", inputs, np.float32, size))

# -- 2. Work ----------------------------------------------------------------
inputs = [data(r, np.float32, 1 << 20, 4) for r in range(size)]
mine = gpu(inputs[rank])
torch.cuda.synchronize()
torch.cuda._sleep(ONE_SECOND)  # a kernel ahead of the allreduce on the current stream
work = dist.all_reduce(mine, async_op=True)
work.wait()
assert not work.is_completed(), "wait() blocked the host (a one-second kernel is ahead of the allreduce)"
counted()
work.synchronize()
assert work.is_completed(), "synchronize() returned before the allreduce was done"
check("all_reduce behind a kernel, synchronized", host(mine), reference("sum", inputs, np.float32, size))
torch.cuda._sleep(ONE_SECOND // 5)
mine = gpu(inputs[rank])
work = dist.all_reduce(mine, async_op=True)
work.wait(timeout=timedelta(seconds=60))
assert work.is_completed(), "wait(timeout) returned before the allreduce was done"
counted()
side = torch.cuda.Stream(device)
with torch.cuda.stream(side):
    mine = torch.zeros(1 << 20, device=device)
    mine.add_(gpu(inputs[rank]))
    work = dist.all_reduce(mine, async_op=True)
work.wait()  # the default stream waits for the side stream's allreduce
check("all_reduce on a side stream", host(mine), reference("sum", inputs, np.float32, size))

# -- 3. point to point --------------------------------------------------------
right, left = (rank + 1) % size, (rank - 1) % size
got = torch.empty(4097, device=device)
for request in dist.batch_isend_irecv([dist.P2POp(dist.isend, gpu(inputs[rank][:4097]), right),
                                       dist.P2POp(dist.irecv, got, left)]):
    request.wait()
check("batch_isend_irecv around the ring", host(got), inputs[left][:4097])
if size > 1:
    got = torch.empty(7, device=device)
    if rank == 0:
        dist.send(gpu(inputs[0][:7]), 1)
    elif rank == 1:
        dist.recv(got, 0)
        check("send/recv", host(got), inputs[0][:7])


# -- 4. DDP -------------------------------------------------------------------
def mlp() -> torch.nn.Module:
    torch.manual_seed(1)
    return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 33)).to(device)


def batch(r: int, step: int) -> tuple:
    g = torch.Generator().manual_seed(1000 * step + r)
    return torch.randn(16, 20, generator=g).to(device), torch.randint(0, 33, (16,), generator=g).to(device)


def loss(model: torch.nn.Module, r: int, step: int) -> torch.Tensor:
    x, y = batch(r, step)
    return torch.nn.functional.cross_entropy(model(x), y)


model, alone = DDP(mlp(), device_ids=[device.index]), mlp()
for step in range(3):
    model.zero_grad()
    loss(model, rank, step).backward()
    mean = [torch.zeros_like(p) for p in alone.parameters()]
    for r in range(size):  # every rank's gradient, on this one process
        alone.zero_grad()
        loss(alone, r, step).backward()
        for m, p in zip(mean, alone.parameters()):
            m += p.grad / size
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
        for p, m in zip(alone.parameters(), mean):
            p -= 0.1 * m
for a, b in zip(model.parameters(), alone.parameters()):
    check("DDP on CUDA against the mean gradient", host(a.detach()).astype(np.float32),
          host(b.detach()).astype(np.float32))

def recording(codec: str, seen: list):
    """The codec's hook, keeping each bucket as given and as returned."""
    def hook(state: hooks.State, bucket):
        contribution = bucket.buffer().clone()
        return getattr(hooks, codec)(state, bucket).then(
            lambda done: seen.append((contribution, done.value().clone())) or done.value())

    return hook


for codec in ("fp16", "bf16", "int8", "onebit"):
    model, seen = DDP(mlp(), device_ids=[device.index]), []
    model.register_comm_hook(hooks.State(codec), recording(codec, seen))
    loss(model, rank, 0).backward()
    assert seen, f"the {codec} hook never ran"
    for contribution, result in seen:
        everyone = [torch.empty_like(contribution) for _ in range(size)]
        dist.all_gather(everyone, contribution)
        stacked = torch.stack(everyone).cpu().numpy()
        exact = stacked.astype(np.float64).mean(axis=0)
        bound = chorus.allreduce_error_bound(codec, stacked).astype(np.float64) / size
        error = np.abs(host(result).astype(np.float64) - exact)
        assert (error <= bound).all(), f"rank {rank}: {codec} hook on CUDA: error {error.max()} over its bound"
        counted()

# PowerSGD at rank 1 on a rank-1 gradient (one input, the same on every rank): the exact average.
layer = torch.nn.Linear(8, 6).to(device)
torch.manual_seed(2)
with torch.no_grad():
    layer.weight.copy_(torch.randn(6, 8))
low_rank = DDP(layer, device_ids=[device.index])
low_rank.register_comm_hook(hooks.PowerSGDState(rank=1), hooks.powersgd)
x = torch.ones(1, 8, device=device)
target = torch.full((1, 6), float(rank), device=device)
torch.nn.functional.mse_loss(low_rank(x), target).backward()
with torch.no_grad():  # the mean of every rank's gradient, by hand: d/dW of mean((Wx + b - t)^2)
    residual = torch.stack([layer.weight @ x[0] + layer.bias - float(r) for r in range(size)]).mean(dim=0)
    weight_grad, bias_grad = 2 / 6 * torch.outer(residual, x[0]), 2 / 6 * residual
check("PowerSGD rank 1 on CUDA, weight", host(layer.weight.grad), host(weight_grad))
check("PowerSGD rank 1 on CUDA, bias", host(layer.bias.grad), host(bias_grad))

# -- 2, last: a wait(timeout) shorter than the work ahead -----------------------
group = dist.new_group()
mine = gpu(inputs[rank])
dist.all_reduce(mine, group=group)  # the group's NCCL communicator, made
torch.cuda._sleep(2 * ONE_SECOND)
work = dist.all_reduce(mine, group=group, async_op=True)
try:
    work.wait(timeout=timedelta(milliseconds=50))
    raise AssertionError("wait(50 ms) behind a two-second kernel returned")
except chorus.TimeoutError as timed_out:
    assert isinstance(timed_out, dist.DistBackendError) and "Timed out" in str(timed_out), repr(timed_out)
    counted()
torch.cuda.synchronize()

dist.destroy_process_group()
print(f"rank {rank}: passed {checks()} GPU backend checks on {device} with {backend}", flush=True)
