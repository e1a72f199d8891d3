"""One rank of the FSDP2 test: a 3-layer MLP sharded with
torch.distributed.fsdp.fully_shard (every layer and the root), trained
with AdamW for a few steps on the backend named on the command line, and
its full parameters before and after written to OUT (rank 0), so the test
compares the chorus run with the Gloo run.

    fsdp.py BACKEND OUT [--steps 4] [--optimizer adamw|sgd] [--divide-factor F] [--loss-scale S]

The same seed gives every rank the same initial model and each rank its
own batches. --divide-factor sets FSDP2's gradient divide factor on every
sharded module, which makes it reduce gradients with
ReduceOp.PREMUL_SUM(1/F) (NCCL's; chorus has it too). Gloo lacks it, so
the test compares that run under plain SGD with Gloo's run without a
factor whose loss is scaled by size/F: the same gradients, averaged.
"""

from __future__ import annotations

import argparse
import os

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule, fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("backend")
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--divide-factor", type=float, default=None)
parser.add_argument("--loss-scale", type=float, default=1.0)
parser.add_argument("--optimizer", choices=("adamw", "sgd"), default="adamw")
arguments = parser.parse_args()

if arguments.backend == "chorus":
    import chorus.torch  # noqa: F401 - registers the backend

dist.init_process_group(arguments.backend)
rank, size = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
# Widths that do not divide by 2 or 3 ranks: FSDP2 pads the shards.
model = torch.nn.Sequential(torch.nn.Linear(13, 31), torch.nn.ReLU(), torch.nn.Linear(31, 17), torch.nn.ReLU(),
                            torch.nn.Linear(17, 5))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(model)
if arguments.divide_factor is not None:
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(arguments.divide_factor)
initial = {name: parameter.full_tensor().detach().clone() for name, parameter in model.named_parameters()}
if arguments.optimizer == "adamw":
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
else:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

generator = torch.Generator().manual_seed(1000 + rank)
for step in range(arguments.steps):
    inputs = torch.randn(8, 13, generator=generator)
    targets = torch.randn(8, 5, generator=generator)
    loss = torch.nn.functional.mse_loss(model(inputs), targets) * arguments.loss_scale
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()

final = {name: parameter.full_tensor().detach().clone() for name, parameter in model.named_parameters()}
if rank == 0:
    torch.save({"initial": initial, "final": final}, arguments.out)
dist.barrier()
print(f"rank {rank}: passed", flush=True)
dist.destroy_process_group()
if arguments.backend == "gloo":
    # Gloo's run-loop threads drop finished works, and the tensors they hold,
    # on their own; one still at it while Python finalizes (a loaded machine)
    # takes the GIL, is made to exit, and std::terminate aborts the process
    # after the run passed (torch 2.15; the backtrace is pytorch/pytorch#179291's).
    # The reference has written its result: leave without finalizing.
    os._exit(0)
