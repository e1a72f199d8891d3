"""One rank of the real-GPU tests: torch CUDA tensors (every rank on
cuda:local_rank modulo the GPUs there) through the collectives and
point-to-point calls, on torch's current stream and on a side stream given
as `stream=`; each result is compared on the host with a NumPy reference of
every rank's input."""

from __future__ import annotations

import os
import sys

import numpy as np
import torch

import chorus
from checking import check, checks, data, reference

comm = chorus.init()
rank, size = comm.rank, comm.size
device = torch.device("cuda", int(os.environ.get("CHORUS_LOCAL_RANK", rank)) % torch.cuda.device_count())
torch.cuda.set_device(device)


def on_gpu(values: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(values.copy()).to(device)


def host(tensor: torch.Tensor) -> np.ndarray:
    return tensor.cpu().numpy()  # .cpu() waits for the current stream


for dtype in (np.float32, np.float16, np.int64, np.uint8):
    for count in (0, 1, 7, 1 << 20):
        inputs = [data(r, dtype, count) for r in range(size)]
        for op in ("sum", "max", "avg") if dtype != np.uint8 else ("sum", "max"):
            mine = on_gpu(inputs[rank])
            comm.allreduce(mine, op)
            check(f"allreduce {np.dtype(dtype).name} x{count} {op}", host(mine), reference(op, inputs, dtype, size))

inputs = [data(r, np.float32, 4097, 1) for r in range(size)]
mine = on_gpu(inputs[rank])
comm.broadcast(mine, size - 1)
check("broadcast", host(mine), inputs[size - 1])
check("allgather", host(comm.allgather(on_gpu(inputs[rank]))), np.stack(inputs))
whole = [data(r, np.float32, 5 * size, 2) for r in range(size)]
check("reduce_scatter", host(comm.reduce_scatter(on_gpu(whole[rank]))),
      reference("sum", whole, np.float32, size)[rank * 5:(rank + 1) * 5])
check("alltoall", host(comm.alltoall(on_gpu(whole[rank]))),
      np.concatenate([whole[r][rank * 5:(rank + 1) * 5] for r in range(size)]))
if size > 1:
    got = torch.zeros(4097, device=device)
    sent = comm.isend(on_gpu(inputs[rank]), (rank + 1) % size)
    comm.irecv(got, (rank - 1) % size).wait()
    sent.wait()
    check("isend/irecv", host(got), inputs[(rank - 1) % size])

# A side stream: a kernel on it writes the input, the allreduce given that stream comes after it, and the
# result is read after the side stream's work.
side = torch.cuda.Stream(device)
with torch.cuda.stream(side):
    mine = torch.zeros(1 << 20, device=device)
    mine.add_(on_gpu(data(rank, np.float32, 1 << 20, 3)))
comm.allreduce(mine, stream=side)
side.synchronize()
check("allreduce on a side stream", mine.cpu().numpy(),
      reference("sum", [data(r, np.float32, 1 << 20, 3) for r in range(size)], np.float32, size))
work = comm.iallreduce(on_gpu(inputs[rank]))
check("iallreduce", host(work.wait()), reference("sum", inputs, np.float32, size))

def two_schemes(over, where: str, seed: int) -> None:
    """Two schemes on CUDA parameters over `over`: local SGD averages at its period, D-PSGD mixes over a ring."""
    from chorus import averaging

    start = [data(r, np.float32, 1001, seed) for r in range(size)]
    model = [on_gpu(start[rank])]
    scheme = averaging.LocalSGD(over, model, period=1)
    scheme.begin_step()
    scheme.end_step()
    check(f"local SGD {where}", host(model[0]), np.mean(start, axis=0).astype(np.float32))
    model = [on_gpu(start[rank])]
    scheme = averaging.DPSGD(over, model)
    scheme.begin_step()
    scheme.end_step()
    ring = [(rank + offset) % size for offset in (-1, 0, 1)]
    check(f"D-PSGD {where}", host(model[0]), (sum(start[j] for j in ring) / 3).astype(np.float32))


# NCCL: the same calls through chorus.nccl's communicator. NCCL puts one rank on a GPU, so with more
# ranks than GPUs on this machine it is not run, and the output says so.
if torch.cuda.device_count() >= size:
    gpus = chorus.nccl.connect(comm)
    for count in (0, 1, 1 << 20):
        inputs = [data(r, np.float32, count, 4) for r in range(size)]
        mine = on_gpu(inputs[rank])
        gpus.allreduce(mine)
        assert count == 0 or gpus.last_algorithm == "nccl", gpus.last_algorithm
        check(f"allreduce through NCCL x{count}", host(mine), reference("sum", inputs, np.float32, size))
    check("allgather through NCCL", host(gpus.allgather(on_gpu(inputs[rank]))), np.stack(inputs))
    mine = on_gpu(inputs[rank])
    gpus.allreduce(mine, "avg", codec="int8")
    exact = np.mean(np.stack(inputs).astype(np.float64), axis=0)
    bound = chorus.allreduce_error_bound("int8", np.stack(inputs)) / size
    assert (np.abs(host(mine) - exact) <= bound).all(), "int8 through NCCL over its bound"
    # Schemes on the NCCL communicator: local SGD's allreduce and D-PSGD's rounds (mixing on the device) on NCCL.
    two_schemes(gpus, "on NCCL", 6)
    gpus.close()
else:
    print(f"rank {rank}: NCCL with {size} ranks not run: NCCL needs a GPU per rank and this machine has "
          f"{torch.cuda.device_count()}", flush=True)

two_schemes(comm, "on CUDA parameters", 5)

comm.barrier()
print(f"rank {rank}: passed {checks()} GPU checks on {device}", flush=True)
comm.close()
sys.exit(0)
