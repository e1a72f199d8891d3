"""NCCL communicators made from chorus ones.

    gpus = chorus.nccl.connect(comm)      # collective: every rank of comm
    gpus.allreduce(grads)                 # grads on the GPU: ncclAllReduce on torch's current stream
    gpus.allreduce(host_array)            # host memory: chorus over UCX, as on comm

Every collective of :class:`chorus.Communicator` (allreduce with codecs,
reduce, reduce_scatter, broadcast, allgather, alltoall, gather, scatter,
barrier, split) and send/recv run on it; device arrays go through NCCL
(alltoall, gather and scatter as grouped ncclSend/ncclRecv), host arrays
through the NCCL communicator's own chorus communicator. A call returns
once its stream has done it; ``i*`` collectives do the same and return a
completed Request. With ``connect(comm, synchronous=False)`` a call on
device arrays returns once it is enqueued on its stream, and
``synchronize(stream)`` is the bounded wait for that stream.

Point-to-point: ``isend``/``irecv`` of device arrays are queued, and the
first ``wait()`` of any of them starts every one queued as one NCCL group,
so a ring of sends and receives cannot deadlock (a host array's starts at
once). NCCL has no tags (messages between two ranks match in order) and no
receive from any source. Waits are bounded by the timeout; an NCCL error
or a timeout aborts the NCCL communicator and raises the chorus error of
its category (PeerFailure, TimeoutError, ...).

The device: ``device=``, else the one chorus uses in this process
(chorus.cuda), else CHORUS_LOCAL_RANK modulo the GPUs seen; it becomes the
process's chorus device.
"""

from __future__ import annotations

from typing import Any, Optional

from . import _chorus
from .communicator import Array, Communicator, _on_stream, _ordered, _stream_handle
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

    def isend(self, tensor: Array, peer: int, tag: int = 0, *, stream: Any = None) -> "QueuedRequest":
        """Queues a send of `tensor` to `peer` (tag 0: NCCL has none), started by the next wait."""
        return self._queue(self._impl.queue_send, tensor, peer, tag, stream)

    def irecv(self, tensor: Array, peer: int, tag: int = 0, *, stream: Any = None) -> "QueuedRequest":
        """Queues a receive of exactly len(tensor) elements from `peer`, started by the next wait."""
        return self._queue(self._impl.queue_recv, tensor, peer, tag, stream)

    def _queue(self, queue: Any, tensor: Array, peer: int, tag: int, stream: Any) -> "QueuedRequest":
        if tag != 0:
            raise InvalidArgument("NCCL has no tags: messages between two ranks match in order (tag=0)")
        queue(tensor, peer)
        return QueuedRequest(self._impl, tensor, _stream_handle(stream, (tensor,)))

    @_ordered
    def post(self) -> None:
        """Starts the queued sends and receives as one NCCL group and waits for them, as their wait() does."""
        self._impl.post()

    def synchronize(self, stream: Any = None) -> None:
        """Waits until `stream` (default: torch's current stream) has done its work, at most the timeout; an
        NCCL error or the timeout aborts the communicator and raises."""
        handle = _stream_handle(stream, ())
        if handle is None:
            import torch

            handle = torch.cuda.current_stream(self.device).cuda_stream
        self._impl.synchronize(handle)

    def abort(self, reason: str = "aborted by the caller") -> None:
        """Stops what the NCCL side has in flight; the communicator is unusable after."""
        self._impl.abort(reason)

    def _unsupported(self, *args: Any, **kwargs: Any) -> Any:
        raise InvalidArgument("an NCCL communicator has no receive from any source and no monitored or "
                              "non-blocking barrier; use the chorus communicator it was made from")

    recv_any = irecv_any = monitored_barrier = ibarrier = _unsupported


class QueuedRequest:
    """A send or receive an NCCL communicator queued. Its first wait() starts every one queued on that
    communicator as one NCCL group, on the stream the call was given (else torch's current stream of the
    tensor's device), and waits for them as the communicator's calls do."""

    __slots__ = ("_impl", "_result", "_stream")

    def __init__(self, impl: Any, result: Array, stream: Optional[int]) -> None:
        self._impl, self._result, self._stream = impl, result, stream

    def wait(self) -> Array:
        with _on_stream(self._stream):
            self._impl.post()
        return self._result

    def test(self) -> bool:
        """Posts what is queued, waits for it, and says True (NCCL reports no partial progress)."""
        self.wait()
        return True


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


def connect(comm: Communicator, device: Optional[int] = None, *, synchronous: bool = True) -> NcclCommunicator:
    """Collective over `comm`: an NCCL communicator of the same ranks, on cuda:`device`. With
    synchronous=False a call on device arrays returns once enqueued on its stream."""
    return NcclCommunicator(_chorus.nccl_connect(comm._impl, device, _library(), synchronous))
