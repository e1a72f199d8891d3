"""chorus as a torch.distributed backend.

    import chorus.torch                                  # registers "chorus"
    torch.distributed.init_process_group("chorus")      # under torchrun, env://

Rank, size and the rendezvous come from torch (its store carries the
address of chorus's own store); nothing reads CHORUS_RANK or CHORUS_ADDR.
Every collective returns a Work backed by a torch Future that chorus
completes from its background thread, so ``async_op=True`` overlaps, and
DDP's gradient buckets are reduced while the backward pass goes on.

Implemented: allreduce (sum, product, min, max, avg; band, bor, bxor on
integers and bool; sparse COO tensors summed), allreduce_coalesced,
broadcast, reduce, allgather, all_gather_coalesced, all_gather_into_tensor,
reduce_scatter, reduce_scatter_tensor, alltoall, alltoall_single (with split
sizes), gather, scatter, barrier, monitored_barrier, send, recv (from a rank
or from any source; isend, irecv, batch_isend_irecv), new_group and
destroy_process_group. Other calls raise NotImplementedError naming the call.

CUDA tensors (the backend registers for cpu and cuda, so
``init_process_group("chorus")``, ``"cpu:chorus,cuda:chorus"`` and
``"cpu:gloo,cuda:chorus"`` serve a model on GPUs) go through an NCCL
communicator made from the group's chorus one at the group's first call on
CUDA tensors, which every rank of the group makes (chorus.nccl), one GPU
per process. They are enqueued on torch's current stream, as torch's NCCL
backend does: a call returns once enqueued, ``Work.wait()`` makes the
caller's current stream wait for it without blocking the host, and
``Work.synchronize()``, ``wait(timeout)`` and ``TORCH_NCCL_BLOCKING_WAIT=1``
block the host until it is done, bounded (an NCCL error or the timeout
aborts the NCCL communicator and raises). isend/irecv (and with them
batch_isend_irecv) are queued and started together, as one NCCL group, by
the first wait of any of them; NCCL has no tags and no receive from any
source. Reduce ops that NCCL lacks (the bitwise ones) and sparse tensors
run over chorus on CUDA tensors (staged through the host).

Errors are torch's: a chorus failure raised through the backend is also a
torch.distributed.DistBackendError (DistNetworkError for the transport's),
its message chorus's own, timeouts worded "Timed out ..." as torch's are;
`except chorus.PeerFailure` still catches it. Calls are recorded by torch's
profilers as "chorus:<call>" while one runs.

Also here: ``chorus.torch.hooks`` (DDP communication hooks with codecs),
``communicator_of(group)`` (the chorus communicator behind a chorus process
group) and ``communicator_for(group)`` (that, or one opened beside another
backend's group), for chorus's own calls and schemes.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any

import torch.distributed as dist

from .communicators import communicator_for, communicator_of
from .failures import torch_error
from .process_group import ProcessGroupChorus
from .works import ChorusWork

__all__ = ["ChorusWork", "ProcessGroupChorus", "communicator_for", "communicator_of", "hooks", "torch_error"]


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> ProcessGroupChorus:
    return ProcessGroupChorus(store, rank, size, timeout)


if "chorus" not in getattr(dist.Backend, "_plugins", {}) and "CHORUS" not in getattr(dist.Backend, "_plugins", {}):
    dist.Backend.register_backend("chorus", _create, devices=["cpu", "cuda"])

from . import hooks  # noqa: E402 - after the backend, which the hooks use
