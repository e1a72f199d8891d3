"""One rank of the killed-rank test: every rank allreduces in a loop; the
last rank kills itself (SIGKILL) after a few rounds; every survivor must
get a Python exception naming the failure, never hang (through torch: one
of torch's types, DistBackendError, that is also chorus's).

    killed.py plain    chorus.init() from CHORUS_* (no launcher)
    killed.py torch    torch.distributed with the chorus backend (env://)
    killed.py nccl     chorus.nccl.connect's communicator on chorus._testing's fake device (NCCL's host adapter)
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np

mode = sys.argv[1]
if mode == "torch":
    import torch
    import torch.distributed as dist

    import chorus.torch  # noqa: F401 - registers the backend

    dist.init_process_group("chorus")
    rank, size = dist.get_rank(), dist.get_world_size()

    def allreduce(values: np.ndarray) -> None:
        dist.all_reduce(torch.from_numpy(values))
elif mode == "nccl":
    import chorus
    import chorus._testing

    fake = chorus._testing.fake_device()
    gpus = chorus.nccl.connect(chorus.init())
    rank, size = gpus.rank, gpus.size
    on_device = fake.upload(np.ones(100000, np.float32))

    def allreduce(values: np.ndarray) -> None:
        gpus.allreduce(on_device)
else:
    import chorus

    comm = chorus.init()
    rank, size = comm.rank, comm.size

    def allreduce(values: np.ndarray) -> None:
        comm.allreduce(values)

values = np.ones(100000, np.float32)
started = time.monotonic()
for round in range(1000000):
    if rank == size - 1 and round == 20:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        allreduce(values)
    except Exception as failure:  # noqa: BLE001 - what the survivor sees is the point
        torch_type = mode == "torch" and isinstance(failure, dist.DistBackendError)
        print(f"rank {rank}: raised {type(failure).__module__}.{type(failure).__name__}"
              f"{' (a DistBackendError)' if torch_type else ''} after "
              f"{time.monotonic() - started:.2f} s: {str(failure).splitlines()[0][:300]}", flush=True)
        sys.exit(0)
    if time.monotonic() - started > 120:
        break
print(f"rank {rank}: no error in {round + 1} rounds", flush=True)
sys.exit(4)
