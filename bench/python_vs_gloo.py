"""torch.distributed over the chorus backend next to Gloo (or, with --device
cuda, next to torch's NCCL backend), in one torchrun job.

    torchrun --nproc-per-node N bench/python_vs_gloo.py --out DIR [--perf CHORUS_PERF_OUTPUT] [--device cuda]
    (bench/python_vs_gloo runs it, with chorus-perf before it, for each rank count)

--device cuda: the tensors and the model on cuda:LOCAL_RANK; the peer is
torch's `nccl` backend, and "direct" is the chorus group's NCCL communicator
called from this process; a timed loop ends when the GPU has done every call
(torch.cuda.synchronize). The DDP steps add torch's own fp16 hook
(fp16_compress_hook) on the nccl group, the one chorus's hooks are to beat.

1. all_reduce (float32 sum, in place) from --from-bytes to --to-bytes, factor 2,
   through a process group of the chorus backend and one of Gloo, made side by
   side in this job, and ("direct") through chorus's C++ allreduce called from
   this process without torch (Communicator.allreduce on the same ranks): the
   in-job ceiling of the backend, measured under the same conditions. Per size
   the three alternate for --rounds rounds and the fastest round is kept. Each round times as many calls as fill about 0.2 s
   (at least 5, at most 2000), after 3 warm-up calls; the time of a call is the
   slowest rank's mean. busbw = 2(n-1)/n * bytes / time, as nccl-tests and
   chorus-perf count it. With --perf (chorus-perf's output for the same rank
   count, run just before this job), each size also shows chorus-perf's
   in-place busbw. On a machine whose speed drifts (a VM throttled after
   seconds of load) the direct column is the fairer ceiling: it runs
   interleaved with the backend.
2. A DDP training step (forward, backward with the gradient buckets' allreduce,
   SGD) of an MLP (784-1024-1024-10, 1.86 M parameters, batch 64 per rank),
   on Gloo's process group and on the chorus backend's, each without a hook and
   with each chorus hook (fp16, bf16, int8, onebit): mean step time over
   --steps steps after 5 warm-up steps, the slowest rank's.

Rank 0 writes DIR/allreduce_nN.csv and DIR/ddp_nN.csv and prints both tables.
"""

from __future__ import annotations

import argparse
import csv
import os
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
from torch.nn.parallel import DistributedDataParallel as DDP

import chorus.torch  # registers the "chorus" backend
from chorus.torch import hooks
from compare import CHORUS_PERF_IN_PLACE_US, allreduce_busbw, measured_rows  # bench/compare.py


def parse_size(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def busbw(size: int, ranks: int, seconds: float) -> float:
    return allreduce_busbw(size, ranks, seconds * 1e6) if ranks > 1 else size / seconds / 1e9


def chorus_perf_busbw(path: Path, ranks: int) -> dict:
    """chorus-perf's in-place busbw per size (the best, if a size repeats)."""
    best = {}
    for fields in measured_rows(path.read_text()):
        size, seconds = int(fields[0]), float(fields[CHORUS_PERF_IN_PLACE_US]) * 1e-6
        best[size] = max(best.get(size, 0.0), busbw(size, ranks, seconds))
    return best


class Job:
    def __init__(self, device: str) -> None:
        dist.init_process_group("gloo")  # the control group: iteration counts, slowest rank's time
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.on_gpu = device == "cuda"
        self.peer = "nccl" if self.on_gpu else "gloo"
        self.device = torch.device("cpu")
        if self.on_gpu:
            self.device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", self.rank)) % torch.cuda.device_count())
            torch.cuda.set_device(self.device)
        self.groups = {"chorus": dist.new_group(backend="chorus"), self.peer: dist.new_group(backend=self.peer)}
        if self.on_gpu:  # the chorus group's NCCL communicator, made by its first call on CUDA tensors
            dist.all_reduce(torch.zeros(1, device=self.device), group=self.groups["chorus"])
            self.direct = self.groups["chorus"].nccl_communicator
        else:
            self.direct = chorus.torch.communicator_of(self.groups["chorus"])

    def finished(self) -> None:
        """Waits until the device has done what was enqueued (nothing to wait for on the CPU)."""
        if self.on_gpu:
            torch.cuda.synchronize(self.device)

    def slowest(self, seconds: float) -> float:
        value = torch.tensor([seconds], dtype=torch.float64)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return value.item()

    def timed(self, call, iterations: int) -> float:
        self.finished()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iterations):
            call()
        self.finished()
        return self.slowest((time.perf_counter() - start) / iterations)

    def allreduce_seconds(self, backend: str, size: int) -> float:
        group = self.groups.get(backend, self.groups["chorus"])
        tensor = torch.ones(size // 4, dtype=torch.float32, device=self.device)
        if backend == "direct":  # chorus's C++ allreduce through the binding, no torch layer
            array = tensor if self.on_gpu else tensor.numpy()

            def call() -> None:
                self.direct.allreduce(array)
        else:
            def call() -> None:
                dist.all_reduce(tensor, group=group)

        call()
        if size and (tensor != self.size).any():
            raise RuntimeError(f"{backend}: all_reduce of {size} B of ones did not give {self.size} everywhere")
        tensor.zero_()  # stays zero however many calls follow
        for _ in range(3):
            call()
        iterations = int(min(2000, max(5, 0.2 / max(self.timed(call, 3), 1e-7))))
        return self.timed(call, iterations)

    def ddp_seconds(self, backend: str, hook: str, steps: int) -> float:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024),
                                    torch.nn.ReLU(), torch.nn.Linear(1024, 10)).to(self.device)
        group = self.groups[backend]
        ddp = DDP(model, process_group=group, device_ids=[self.device.index] if self.on_gpu else None)
        if hook == "torch fp16":
            ddp.register_comm_hook(group, fp16_compress_hook)
        elif hook != "none":
            ddp.register_comm_hook(hooks.State(hook, process_group=group), getattr(hooks, hook))
        optimizer = torch.optim.SGD(ddp.parameters(), lr=0.01)
        generator = torch.Generator().manual_seed(self.rank)
        x, y = torch.randn(64, 784, generator=generator), torch.randint(0, 10, (64,), generator=generator)
        x, y = x.to(self.device), y.to(self.device)

        def step() -> None:
            optimizer.zero_grad()
            torch.nn.functional.cross_entropy(ddp(x), y).backward()
            optimizer.step()

        for _ in range(5):
            step()
        return self.timed(step, steps)


def table(rows: list, columns: list) -> str:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(str(row[c]) for c in columns) + " |" for row in rows]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--from-bytes", default="1K")
    parser.add_argument("--to-bytes", default="64M")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--perf", type=Path, default=None, help="chorus-perf allreduce output, same rank count")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()

    job = Job(args.device)
    n, peer = job.size, job.peer
    ceiling = chorus_perf_busbw(args.perf, n) if args.perf else {}
    rows = []
    size = parse_size(args.from_bytes)
    while size <= parse_size(args.to_bytes):
        best = {"chorus": float("inf"), peer: float("inf"), "direct": float("inf")}
        for _ in range(args.rounds):
            for backend in best:
                best[backend] = min(best[backend], job.allreduce_seconds(backend, size))
        row = {"ranks": n, "size_bytes": size,
               "chorus_us": f"{best['chorus'] * 1e6:.1f}", f"{peer}_us": f"{best[peer] * 1e6:.1f}",
               "chorus_busbw": f"{busbw(size, n, best['chorus']):.4g}",
               f"{peer}_busbw": f"{busbw(size, n, best[peer]):.4g}",
               f"chorus/{peer}": f"{best[peer] / best['chorus']:.2f}",
               "direct_busbw": f"{busbw(size, n, best['direct']):.4g}",
               "backend/direct": f"{best['direct'] / best['chorus']:.2f}"}
        if size in ceiling:
            row["chorus_perf_busbw"] = f"{ceiling[size]:.3f}"
            row["backend/chorus_perf"] = f"{busbw(size, n, best['chorus']) / ceiling[size]:.2f}"
        rows.append(row)
        if job.rank == 0:
            print(f"all_reduce {size} B: chorus {row['chorus_us']} us, {peer} {row[f'{peer}_us']} us", flush=True)
        size *= 2

    steps = []
    runs = [(backend, hook) for hook in ("none", "fp16", "bf16", "int8", "onebit") for backend in (peer, "chorus")]
    if job.on_gpu:
        runs.insert(1, (peer, "torch fp16"))
    for backend, hook in runs:
        seconds = job.ddp_seconds(backend, hook, args.steps)
        steps.append({"ranks": n, "backend": backend, "hook": hook, "step_ms": f"{seconds * 1e3:.2f}"})
        if job.rank == 0:
            print(f"DDP step, {backend}, hook {hook}: {seconds * 1e3:.2f} ms", flush=True)

    if job.rank == 0:
        args.out.mkdir(parents=True, exist_ok=True)
        for name, data in ((f"allreduce_n{n}.csv", rows), (f"ddp_n{n}.csv", steps)):
            with open(args.out / name, "w", newline="") as handle:
                writer = csv.DictWriter(handle, fieldnames=max((list(row) for row in data), key=len), restval="")
                writer.writeheader()
                writer.writerows(data)
        columns = ["size_bytes", "chorus_us", f"{peer}_us", "chorus_busbw", f"{peer}_busbw", f"chorus/{peer}",
                   "direct_busbw", "backend/direct"]
        if ceiling:
            columns += ["chorus_perf_busbw", "backend/chorus_perf"]
        where = f"{n} ranks on {'GPUs' if job.on_gpu else 'CPUs'}"
        print(f"\n### all_reduce, {where}: busbw in GB/s\n\n{table(rows, columns)}")
        print(f"\n### DDP step (MLP 784-1024-1024-10), {where}\n\n{table(steps, ['backend', 'hook', 'step_ms'])}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
