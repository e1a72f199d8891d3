"""An allreduce from PyTorch's world, printing chorus-perf's columns (in place,
float sum), so bench/compare reads it as it reads the C++ peers
(peer_sweep.hpp):
  --backend gloo       torch.distributed.all_reduce on torch's own Gloo;
  --backend deepspeed  DeepSpeed's shared-memory allreduce for CPUs
                       (deepspeed.comm.inference_all_reduce, its C++ op built
                       on first use), the ranks meeting through Gloo.

    torchrun --nproc-per-node N bench/peers/torch_allreduce.py [--backend gloo]
        [-b 1K] [-e 256M] [-f 2] [-n 10] [-w 3] [--auto-iters 64M]

Per size: -w warm-up calls, then n calls, n at least -n and, for small sizes,
as many as move --auto-iters bytes (at most 2000), as chorus-perf counts them.
The time of a size is the ranks' mean of their mean time per call, with the
fastest and slowest rank's beside it. Inputs are the small integers
chorus-perf uses, so every sum is exact and every rank checks every element.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist


def size_of(text: str) -> int:
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def inputs(rank: int, count: int) -> torch.Tensor:
    index = torch.arange(count, dtype=torch.int64)
    return ((index * 7 + rank * 3) % 5).to(torch.float32)


def measure(allreduce, tensor: torch.Tensor, calls: int) -> float:
    dist.barrier()
    start = time.perf_counter()
    for _ in range(calls):
        allreduce(tensor)
    return (time.perf_counter() - start) / calls


def start(backend: str):
    """Joins the ranks; returns the allreduce to time."""
    if backend != "deepspeed":
        dist.init_process_group(backend)
        return dist.all_reduce
    # DeepSpeed's shared-memory op starts only where LOCAL_SIZE (which its own
    # launcher sets) says every rank is on this host; without it the op runs
    # uninitialised and crashes. Its CPU accelerator needs saying so here,
    # where torch was built with CUDA.
    os.environ.setdefault("LOCAL_SIZE", os.environ.get("LOCAL_WORLD_SIZE", "1"))
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed
    import deepspeed.comm

    deepspeed.init_distributed(dist_backend="gloo")
    return deepspeed.comm.inference_all_reduce


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", default="gloo")
    parser.add_argument("-b", dest="min", type=size_of, default=8)
    parser.add_argument("-e", dest="max", type=size_of, default=1 << 20)
    parser.add_argument("-f", dest="factor", type=int, default=2)
    parser.add_argument("-n", dest="iterations", type=int, default=20)
    parser.add_argument("-w", dest="warmup", type=int, default=5)
    parser.add_argument("--auto-iters", dest="auto_bytes", type=size_of, default=64 << 20)
    args = parser.parse_args()
    allreduce = start(args.backend)
    rank, ranks = dist.get_rank(), dist.get_world_size()
    if rank == 0:
        print(f"# torch {torch.__version__} {args.backend} allreduce float sum in place: {ranks} ranks")
        print("#    size(B)      count      type     op                algo  time(us)       min-max(us)"
              "   algbw   busbw #wrong")
    size, failures = args.min, 0
    while size <= args.max:
        count = max(1, size // 4)
        expected = sum(inputs(r, count) for r in range(ranks))
        tensor = inputs(rank, count)
        allreduce(tensor)
        wrong = torch.tensor([int((tensor != expected).sum())], dtype=torch.int64)
        tensor.zero_()  # stays zero however many calls follow
        for _ in range(args.warmup):
            allreduce(tensor)
        calls = max(args.iterations, min(2000, args.auto_bytes // (count * 4))) if args.auto_bytes else args.iterations
        mine = measure(allreduce, tensor, calls) * 1e6
        spread = torch.tensor([mine, mine, -mine], dtype=torch.float64)
        dist.all_reduce(spread[:1])
        dist.all_reduce(spread[1:], op=dist.ReduceOp.MIN)  # min of mine and of -mine: fastest, -slowest
        dist.all_reduce(wrong)
        mean_us, low_us, high_us = spread[0].item() / ranks, spread[1].item(), -spread[2].item()
        failures += int(wrong.item())
        if rank == 0:
            algbw = count * 4 / (mean_us * 1e-6) / 1e9
            busbw = algbw * 2 * (ranks - 1) / ranks
            print(f" {count * 4:11d} {count:10d} {'float':>9} {'sum':>6} {args.backend:>19} {mean_us:9.1f} "
                  f"{f'{low_us:.1f}-{high_us:.1f}':>17} {algbw:7.2f} {busbw:7.2f} {int(wrong.item()):6d}", flush=True)
        size *= args.factor
    dist.destroy_process_group()
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
