"""NCCL communicators made from chorus ones.

    gpus = chorus.nccl.connect(comm)      # collective: every rank of comm
    gpus.allreduce(grads)                 # grads on the GPU: ncclAllReduce on torch's current stream
    gpus.allreduce(host_array)            # host memory: chorus over UCX, as on comm

Every collective of :class:`chorus.Communicator` (allreduce with codecs,
reduce, reduce_scatter, broadcast, allgather, alltoall, gather, scatter,
barrier, split) and blocking send/recv run on it; device arrays go through
NCCL (alltoall, gather and scatter as grouped ncclSend/ncclRecv), host
arrays through the NCCL communicator's own chorus communicator. A call
returns once its stream has done it; ``i*`` calls do the same and return a
completed Request. NCCL has no tags (messages between two ranks match in
order) and no receive from any source. Waits are bounded by the timeout;
an NCCL error or a timeout aborts the NCCL communicator and raises the
chorus error of its category (PeerFailure, TimeoutError, ...).

The device: ``device=``, else the one chorus uses in this process
(chorus.cuda), else CHORUS_LOCAL_RANK modulo the GPUs seen; it becomes the
process's chorus device.
"""

from __future__ import annotations

from typing import Any, Optional

from . import _chorus
from .communicator import Communicator
from .errors import InvalidArgument


class NcclCommunicator(Communicator):
    """A chorus.Communicator whose device arrays go through NCCL."""

    @property
    def device(self) -> int:
        """The CUDA device index this communicator's NCCL side runs on."""
        return self._impl.device

    @property
    def joined(self) -> bool:
        return False

    def split(self, color: int, key: Optional[int] = None) -> "NcclCommunicator":
        """Collective: ranks with the same color form an NCCL communicator, ordered by key (default: rank)."""
        return NcclCommunicator(self._impl.split(color, self.rank if key is None else key))

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidArgument("an NCCL communicator has blocking send and recv only (NCCL has no tags and no "
                              "receive from any source); use the chorus communicator it was made from")

    isend = irecv = recv_any = irecv_any = monitored_barrier = ibarrier = _unsupported


def _library() -> Any:
    """The NCCL library as chorus's adapter (chorus._nccl), or None where there is none. torch is imported
    first where it is installed: the process then has one NCCL, torch's (the loader shares libnccl.so.2 by
    its soname, and torch needs the symbols of the one it ships)."""
    try:
        import torch  # noqa: F401
    except ImportError:
        pass
    try:
        from . import _nccl
    except ImportError:
        return None
    return _nccl.adapter()


def connect(comm: Communicator, device: Optional[int] = None) -> NcclCommunicator:
    """Collective over `comm`: an NCCL communicator of the same ranks, on cuda:`device`."""
    return NcclCommunicator(_chorus.nccl_connect(comm._impl, device, _library()))
