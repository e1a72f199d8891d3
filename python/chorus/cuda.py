"""chorus and CUDA memory: which GPU chorus uses in this process.

chorus takes one GPU per process, as torch's NCCL backend does: the device
given to :func:`use_device`, else that of the first CUDA array a collective
is given. An array on another device is :class:`chorus.InvalidArgument`;
a CUDA array where this extension was built without the CUDA toolkit, or
where there is no GPU, is :class:`chorus.Unavailable`.

    torch.cuda.set_device(local_rank)
    chorus.cuda.use_device(local_rank)      # optional: else the first tensor's
    comm.allreduce(grads)                   # grads on cuda:local_rank
"""

from __future__ import annotations

from typing import Optional

from . import _chorus


def use_device(index: int) -> None:
    """Makes cuda:`index` the device chorus uses in this process (before its first device array)."""
    _chorus._use_device(int(index))


def device() -> Optional[int]:
    """The index of the device chorus uses, or None before it has one."""
    return _chorus._device()["index"]


def built_with_cuda() -> bool:
    """Whether this chorus extension was built with the CUDA runtime (it takes CUDA arrays)."""
    return bool(_chorus._device()["built_with_cuda"])


def built_with_kernels() -> bool:
    """Whether nvcc compiled chorus's device kernels into this extension: the reductions and codecs that
    NCCL's compressed allreduce and the DDP hooks run on the GPU. Without them such a call on CUDA arrays
    is :class:`chorus.Unavailable` where it cannot stage through the host."""
    return bool(_chorus._device()["built_with_kernels"])
