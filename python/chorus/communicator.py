"""chorus.Communicator: the collectives on any DLPack array.

Arrays are NumPy arrays, torch tensors, CuPy arrays or anything else with
``__dlpack__``, C-contiguous and of a type chorus has (int8-64, uint8-64,
float16, bfloat16, float32, float64, bool). They are used where they are:
an in-place call writes the caller's array; nothing is copied or converted,
and an array chorus cannot take raises :class:`chorus.InvalidArgument`
before anything is written.

CUDA arrays (one GPU per process: chorus.cuda) go through the collectives
and point-to-point calls, staged through pinned memory or handed to the
transport as they are (CHORUS_CUDA_PATH). Each such call takes `stream=`
(an integer cudaStream_t, a torch or CuPy stream; default: torch's current
stream for torch tensors, else the legacy default stream): it reads its
arrays after the work already on that stream, and work put on the stream
after it sees its result.

Every blocking call releases the GIL. ``i*`` calls start the operation on
the communicator's background thread and return a :class:`Request`; keep
the arrays unchanged until it is done.
"""

from __future__ import annotations

import atexit
import enum
import functools
import os
import weakref
from typing import Any, Callable, Optional, Union

from . import _chorus
from .errors import InvalidArgument

Array = Any  # a NumPy array, a torch tensor, or another DLPack exporter


class Op(str, enum.Enum):
    """Reduction operators; a plain string ("sum") works as well."""

    SUM = "sum"
    PROD = "prod"
    MIN = "min"
    MAX = "max"
    AVG = "avg"
    BAND = "band"
    BOR = "bor"
    BXOR = "bxor"


OpLike = Union[Op, str]
CodecLike = Union[None, str, "_chorus.Codec", "_chorus.ErrorFeedback"]


def _op_name(op: OpLike) -> str:
    return op.value if isinstance(op, Op) else str(op)


def _empty_like(array: Array, shape: tuple, role: str) -> Array:
    """A new array of `array`'s type and framework, for an output not given."""
    module = type(array).__module__
    if module.startswith("torch"):
        import torch

        return torch.empty(shape, dtype=array.dtype, device=array.device)
    if module.startswith("numpy"):
        import numpy

        return numpy.empty(shape, dtype=array.dtype)
    raise InvalidArgument(f"pass {role}=: chorus allocates outputs only for NumPy arrays and torch tensors")


def _stream_handle(stream: Any, arguments: tuple) -> Optional[int]:
    """The device stream a call orders on, as an integer cudaStream_t:
    `stream` as given (an integer, a torch.cuda.Stream or a CuPy stream),
    else torch's current stream on the device of the first torch CUDA
    tensor among the arguments; None for a call on host arrays."""
    if stream is not None:
        for attribute in ("cuda_stream", "ptr"):  # torch, CuPy
            if hasattr(stream, attribute):
                return int(getattr(stream, attribute))
        return int(stream)
    for value in arguments:
        if getattr(value, "is_cuda", False) is True:
            import torch

            return torch._C._cuda_getCurrentRawStream(value.device.index)
    return None


class _on_stream:
    """``with _on_stream(handle):`` the chorus calls inside read and write
    device arrays in order with the work on the cudaStream_t `handle` (an
    integer; None: the calls' own default), as the thread's chorus stream."""

    __slots__ = ("handle", "previous")

    def __init__(self, handle: Optional[int]) -> None:
        self.handle = handle

    def __enter__(self) -> None:
        if self.handle is not None:
            self.previous = _chorus._set_stream(self.handle)

    def __exit__(self, *failure: Any) -> None:
        if self.handle is not None:
            _chorus._set_stream(self.previous)


def _ordered(method: Callable) -> Callable:
    """A call that takes `stream=`: its device arrays are read and written in
    order with the work on that stream (see _stream_handle), and work put on
    the stream after the call sees its result."""

    @functools.wraps(method)
    def call(self: "Communicator", *args: Any, stream: Any = None, **kwargs: Any) -> Any:
        with _on_stream(_stream_handle(stream, (*args, *kwargs.values()))):
            return method(self, *args, **kwargs)

    return call


def _count(array: Array) -> int:
    size = getattr(array, "numel", None)
    return int(size()) if callable(size) else int(getattr(array, "size"))


class Request:
    """A non-blocking operation. wait() returns its result (the output)."""

    __slots__ = ("_pending", "_result")

    def __init__(self, pending: _chorus.Request, result: Array = None) -> None:
        self._pending = pending
        self._result = result

    def test(self) -> bool:
        """True once done; raises the operation's error."""
        return self._pending.test()

    def wait(self) -> Array:
        """Waits until done (bounded by the timeout) and returns the output."""
        self._pending.wait()
        return self._result

    @property
    def source(self) -> int:
        """For a receive from any source (irecv_any): the sender's rank once done, else -1."""
        return self._pending.source


_open: "weakref.WeakSet[Communicator]" = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    # Before the interpreter goes: background threads finish while Python
    # can still run their callbacks.
    for comm in list(_open):
        comm.close()


class Communicator:
    """A group of ranks. Made by :func:`chorus.init` or :func:`chorus.connect`."""

    def __init__(self, impl: _chorus.Communicator) -> None:
        self._impl = impl
        _open.add(self)

    # -- who ---------------------------------------------------------------
    @property
    def rank(self) -> int:
        return self._impl.rank

    @property
    def size(self) -> int:
        return self._impl.size

    @property
    def joined(self) -> bool:
        """Whether this process joined the job while it ran (chorus.join, CHORUS_JOIN=1)."""
        return self._impl.joined

    @property
    def timeout(self) -> float:
        """Seconds every wait is bounded by."""
        return self._impl.timeout

    @property
    def last_algorithm(self) -> str:
        """The algorithm the last blocking collective ran (ring, tree, ...)."""
        return self._impl.last_algorithm

    @property
    def closed(self) -> bool:
        return self._impl.closed

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"rank {self.rank} of {self.size}"
        return f"<chorus.Communicator {state}>"

    # -- lifetime ----------------------------------------------------------
    def close(self) -> None:
        """Finishes queued non-blocking work and leaves the job."""
        self._impl.close()

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def barrier(self) -> None:
        self._impl.barrier()

    def ibarrier(self, callback: Optional[Callable[[Optional[BaseException]], None]] = None) -> Request:
        """barrier, started on the background thread after the collectives started before it."""
        return Request(self._impl.ibarrier(callback))

    def monitored_barrier(self, timeout: float, *, wait_all: bool = False) -> None:
        """A barrier that names who did not come: rank 0 waits up to `timeout`
        seconds for every rank and raises chorus.TimeoutError naming the first
        rank missing (every one with wait_all); the ranks that came raise too,
        naming rank 0 or hearing from it."""
        self._impl.monitored_barrier(timeout, wait_all)

    def split(self, color: int, key: Optional[int] = None) -> "Communicator":
        """Collective: ranks with the same color form a communicator, ordered by key (default: rank)."""
        return Communicator(self._impl.split(color, self.rank if key is None else key))

    # -- reductions --------------------------------------------------------
    @_ordered
    def allreduce(self, tensor: Array, op: OpLike = Op.SUM, *, out: Array = None, algo: str = "auto",
                  codec: CodecLike = None) -> Array:
        """Reduces over all ranks, into `out` if given, else in place. Returns the result.

        codec: "fp16", "bf16", "int8", "onebit", a chorus.Codec or a
        chorus.ErrorFeedback (float32, op sum or avg).
        """
        self._impl.allreduce(tensor, out, _op_name(op), algo, codec)
        return tensor if out is None else out

    @_ordered
    def iallreduce(self, tensor: Array, op: OpLike = Op.SUM, *, out: Array = None, algo: str = "auto",
                   codec: CodecLike = None, callback: Optional[Callable[[Optional[BaseException]], None]] = None
                   ) -> Request:
        pending = self._impl.iallreduce(tensor, out, _op_name(op), algo, codec, callback)
        return Request(pending, tensor if out is None else out)

    def powersgd(self, state: "_chorus.PowerSGD", tensors: "list[Array]") -> "list[Array]":
        """Averages the float32 `tensors` in place through PowerSGD (chorus.PowerSGD: their shapes as matrices,
        the rank, error feedback): two allreduces of rank-r factors instead of one of every element."""
        self._impl.powersgd(state, list(tensors))
        return tensors

    def ipowersgd(self, state: "_chorus.PowerSGD", tensors: "list[Array]", *,
                  callback: Optional[Callable[[Optional[BaseException]], None]] = None) -> Request:
        """powersgd on the background thread; the state and tensors are kept until it is done."""
        return Request(self._impl.ipowersgd(state, list(tensors), callback))

    @_ordered
    def reduce(self, tensor: Array, root: int, op: OpLike = Op.SUM, *, out: Array = None) -> Array:
        """Reduces onto `root`: into `out` (else `tensor`) there; other ranks' arrays are unchanged."""
        self._impl.reduce(tensor, root, out, _op_name(op))
        return tensor if out is None else out

    @_ordered
    def reduce_scatter(self, input: Array, op: OpLike = Op.SUM, *, out: Array = None, algo: str = "auto") -> Array:
        """Reduces `input` (size blocks) over all ranks; rank r gets block r."""
        out = self._block_of(input, out)
        self._impl.reduce_scatter(input, out, _op_name(op), algo)
        return out

    @_ordered
    def ireduce_scatter(self, input: Array, op: OpLike = Op.SUM, *, out: Array = None, algo: str = "auto",
                        callback: Optional[Callable[[Optional[BaseException]], None]] = None) -> Request:
        out = self._block_of(input, out)
        return Request(self._impl.ireduce_scatter(input, out, _op_name(op), algo, callback), out)

    # -- data movement -----------------------------------------------------
    @_ordered
    def broadcast(self, tensor: Array, root: int, *, algo: str = "auto", codec: CodecLike = None) -> Array:
        """Copies `root`'s tensor into every rank's, in place."""
        self._impl.broadcast(tensor, root, algo, codec)
        return tensor

    @_ordered
    def ibroadcast(self, tensor: Array, root: int, *, algo: str = "auto", codec: CodecLike = None,
                   callback: Optional[Callable[[Optional[BaseException]], None]] = None) -> Request:
        return Request(self._impl.ibroadcast(tensor, root, algo, codec, callback), tensor)

    @_ordered
    def allgather(self, tensor: Array, *, out: Array = None, algo: str = "auto", codec: CodecLike = None) -> Array:
        """Every rank's tensor in rank order; a new array of shape (size, *tensor.shape) unless `out` is given."""
        out = self._stacked(tensor, out)
        self._impl.allgather(tensor, out, algo, codec)
        return out

    @_ordered
    def iallgather(self, tensor: Array, *, out: Array = None, algo: str = "auto", codec: CodecLike = None,
                   callback: Optional[Callable[[Optional[BaseException]], None]] = None) -> Request:
        out = self._stacked(tensor, out)
        return Request(self._impl.iallgather(tensor, out, algo, codec, callback), out)

    @_ordered
    def alltoall(self, input: Array, *, out: Array = None) -> Array:
        """Block r of `input` goes to rank r; block r of the result came from rank r."""
        out = _empty_like(input, tuple(input.shape), "out") if out is None else out
        self._impl.alltoall(input, out)
        return out

    @_ordered
    def ialltoall(self, input: Array, *, out: Array = None,
                  callback: Optional[Callable[[Optional[BaseException]], None]] = None) -> Request:
        out = _empty_like(input, tuple(input.shape), "out") if out is None else out
        return Request(self._impl.ialltoall(input, out, callback), out)

    @_ordered
    def gather(self, tensor: Array, root: int, *, out: Array = None) -> Optional[Array]:
        """Every rank's tensor onto `root`: (size, *tensor.shape) there, None elsewhere."""
        if self.rank == root and out is None:
            out = _empty_like(tensor, (self.size, *tensor.shape), "out")
        self._impl.gather(tensor, out if self.rank == root else None, root)
        return out if self.rank == root else None

    @_ordered
    def scatter(self, input: Optional[Array], root: int, *, out: Array) -> Array:
        """Block r of `root`'s input into rank r's `out`."""
        self._impl.scatter(input if self.rank == root else None, out, root)
        return out

    # -- point to point ----------------------------------------------------
    @_ordered
    def send(self, tensor: Array, peer: int, tag: int = 0) -> None:
        self._impl.send(tensor, peer, tag)

    @_ordered
    def recv(self, tensor: Array, peer: int, tag: int = 0) -> Array:
        """Receives exactly len(tensor) elements from `peer` into `tensor`."""
        self._impl.recv(tensor, peer, tag)
        return tensor

    @_ordered
    def isend(self, tensor: Array, peer: int, tag: int = 0,
              callback: Optional[Callable[[Optional[BaseException]], None]] = None) -> Request:
        return Request(self._impl.isend(tensor, peer, tag, callback), tensor)

    @_ordered
    def irecv(self, tensor: Array, peer: int, tag: int = 0,
              callback: Optional[Callable[[Optional[BaseException]], None]] = None) -> Request:
        return Request(self._impl.irecv(tensor, peer, tag, callback), tensor)

    @_ordered
    def recv_any(self, tensor: Array, tag: int = 0) -> int:
        """Receives exactly len(tensor) elements from whichever rank sends with
        `tag` first; returns that rank."""
        request = self.irecv_any(tensor, tag)
        request.wait()
        return request.source

    @_ordered
    def irecv_any(self, tensor: Array, tag: int = 0,
                  callback: Optional[Callable[[Optional[BaseException]], None]] = None) -> Request:
        """recv_any, non-blocking: the Request's `source` is the sender once done."""
        return Request(self._impl.irecv_any(tensor, tag, callback), tensor)

    # -- helpers -----------------------------------------------------------
    def _stacked(self, tensor: Array, out: Array) -> Array:
        return _empty_like(tensor, (self.size, *tensor.shape), "out") if out is None else out

    def _block_of(self, input: Array, out: Array) -> Array:
        if out is not None:
            return out
        shape = tuple(input.shape)
        if shape and shape[0] % self.size == 0:
            return _empty_like(input, (shape[0] // self.size, *shape[1:]), "out")
        count = _count(input)
        if count % self.size:
            raise InvalidArgument(f"reduce_scatter: {count} elements do not split into {self.size} equal blocks")
        return _empty_like(input, (count // self.size,), "out")


def init(*, timeout: Optional[float] = None, progress: Optional[str] = None,
         check: Optional[bool] = None) -> Communicator:
    """Joins the job a launcher started: chorus-run, mpirun or srun (rank and
    size from their variables, the store at CHORUS_ADDR); one rank alone
    without one. timeout: seconds (default CHORUS_TIMEOUT, else 180)."""
    return Communicator(_chorus.init(timeout, progress, check))


def join(*, job_file: Optional[str] = None, address: Optional[str] = None, token: Optional[str] = None,
         size: Optional[int] = None, timeout: Optional[float] = None, progress: Optional[str] = None,
         check: Optional[bool] = None) -> Communicator:
    """Joins a running job: takes the next free rank and returns this
    process's world communicator (``joined`` is True). The asynchronous
    schemes (GoSGD, EASGDAsync, ParameterServer in "ssp" and "downpour")
    made on it are admitted by the job's ranks and start from the job's
    model; it runs no collective with them. Where the job is: `job_file`
    (what ``chorus-run --job-file PATH`` wrote), else `address`, `token`
    and `size`, else CHORUS_ADDR, CHORUS_TOKEN and CHORUS_SIZE.
    ``chorus.init()`` does the same under CHORUS_JOIN=1 (``chorus-run --join``)."""
    found = dict(os.environ)
    if job_file is not None:
        with open(job_file, encoding="utf-8") as lines:
            found.update(line.strip().split("=", 1) for line in lines if "=" in line)
    address = address if address is not None else found.get("CHORUS_ADDR")
    token = token if token is not None else found.get("CHORUS_TOKEN", "")
    size = size if size is not None else int(found["CHORUS_SIZE"]) if "CHORUS_SIZE" in found else None
    if address is None or size is None:
        raise InvalidArgument("chorus.join: where is the job? give job_file=, or address= and size= "
                              "(or set CHORUS_ADDR and CHORUS_SIZE)")
    return Communicator(_chorus.join(address, token, size, timeout, progress, check))


def connect(rank: int, size: int, *, publish: Callable[[str, int], None], look_up: Callable[[], str],
            host: str = "0.0.0.0", token: str = "", local_size: Optional[int] = None,
            timeout: Optional[float] = None, progress: Optional[str] = None,
            check: Optional[bool] = None) -> Communicator:
    """Joins a job whose rank and size are known, the store's address going
    through another key-value store: rank 0 hosts chorus's store on a free
    port of `host` and calls publish(host, port); the others call look_up(),
    which returns "host:port". chorus.torch passes torch's store."""
    return Communicator(_chorus.connect(rank, size, size if local_size is None else local_size, host, token,
                                        publish, look_up, timeout, progress, check))
