"""chorus as a torch.distributed backend.

    import chorus.torch                                  # registers "chorus"
    torch.distributed.init_process_group("chorus")      # under torchrun, env://

Rank, size and the rendezvous come from torch (its store carries the
address of chorus's own store); nothing reads CHORUS_RANK or CHORUS_ADDR.
Every collective returns a Work backed by a torch Future that chorus
completes from its background thread, so ``async_op=True`` overlaps, and
DDP's gradient buckets are reduced while the backward pass goes on.

Implemented: allreduce (sum, product, min, max, avg; band, bor, bxor on
integers and bool), allreduce_coalesced, broadcast, reduce, allgather,
all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, alltoall,
alltoall_single (with split sizes), gather, scatter, barrier, send, recv
(isend, irecv, batch_isend_irecv).
Other calls raise NotImplementedError naming the call. CPU tensors only.

Also here: ``chorus.torch.hooks`` (DDP communication hooks with codecs),
``communicator_of(group)`` (the chorus communicator behind a chorus process
group) and ``communicator_for(group)`` (that, or one opened beside another
backend's group), for chorus's own calls and schemes.
"""

from __future__ import annotations

import os
import secrets
import socket
from datetime import timedelta
from typing import Any, Callable, List, Optional

import torch
import torch.distributed as dist

from ..communicator import Communicator, connect
from ..errors import Error, InvalidArgument

__all__ = ["ChorusWork", "ProcessGroupChorus", "communicator_for", "communicator_of", "hooks"]

_REDUCE_OPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.PRODUCT: "prod",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.BAND: "band",
    dist.ReduceOp.BOR: "bor",
    dist.ReduceOp.BXOR: "bxor",
}


def _op_name(op: Any, call: str) -> str:
    for known, name in _REDUCE_OPS.items():
        if op == known:
            return name
    raise NotImplementedError(f"chorus backend: {call} with reduce op {op} is not supported "
                              "(SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR are)")


def _own_address() -> str:
    """The address other hosts reach this one at: CHORUS_HOST, else the one
    this host uses towards MASTER_ADDR, else its name's."""
    if os.environ.get("CHORUS_HOST"):
        return os.environ["CHORUS_HOST"]
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((master, int(os.environ.get("MASTER_PORT", "29500"))))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _connect_through(store: Any, rank: int, size: int, timeout: timedelta) -> Communicator:
    """A chorus communicator whose store address travels through torch's store."""
    if rank == 0:
        token = secrets.token_hex(16)
        store.set("chorus/token", token)
    else:
        token = store.get("chorus/token").decode()
    own = _own_address()
    seconds = None if os.environ.get("CHORUS_TIMEOUT") else timeout.total_seconds()
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    return connect(rank, size, host="0.0.0.0", token=token, local_size=local_size, timeout=seconds,
                   publish=lambda _host, port: store.set("chorus/store", f"{own}:{port}"),
                   look_up=lambda: store.get("chorus/store").decode())


def _cpu_tensors(tensors: List[torch.Tensor], call: str) -> None:
    for tensor in tensors:
        if tensor.device.type != "cpu":
            raise InvalidArgument(f"chorus backend: {call} got a {tensor.device} tensor; the backend takes CPU "
                                  "tensors (register it for cpu, use NCCL for cuda)")


def _future_with_callback(result: Any) -> "tuple[torch.futures.Future, Callable[[Optional[BaseException]], None]]":
    """A torch Future and the completion callback a non-blocking chorus call
    takes: called with None, the future gets `result`; with an exception, that."""
    future: torch.futures.Future = torch.futures.Future()

    def done(failure: Optional[BaseException]) -> None:
        if failure is None:
            future.set_result(result)
        else:
            future.set_exception(failure)

    return future, done


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as chorus takes it: complex numbers as pairs of reals."""
    return torch.view_as_real(tensor) if tensor.is_complex() else tensor


class ChorusWork(dist.Work):
    """The Work of a chorus call: wait() raises what the call raised (a Work
    made with torch's _create_work_from_future reports success instead), and
    get_future() is the future chorus completes."""

    def __init__(self, future: torch.futures.Future, request: Any = None) -> None:
        super().__init__()
        self._future = future
        self.request = request  # chorus's, for a call started on a chorus thread

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        if self.request is not None:
            self.request.wait()  # raises the collective's exception
        self._future.wait()
        return True

    def is_completed(self) -> bool:
        return self._future.done()

    def is_success(self) -> bool:
        if not self._future.done():
            return False
        try:
            self._future.value()
        except Exception:  # noqa: BLE001 - a failed collective
            return False
        return True

    def get_future(self) -> torch.futures.Future:
        return self._future


class ProcessGroupChorus(dist.ProcessGroup):
    """A torch process group whose collectives are chorus's."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._comm = _connect_through(store, rank, size, timeout)
        self._impl = self._comm._impl
        self._last_started: Any = None  # the last collective started on the background thread

    # -- what torch asks of every group -------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "chorus"

    @property
    def communicator(self) -> Communicator:
        return self._comm

    # torch asks a group for its per-device backend (batch_isend_irecv asks
    # it whether it coalesces): this group is its own, for CPU tensors.
    supports_coalescing = False

    def _get_backend(self, device: Any) -> "ProcessGroupChorus":
        if torch.device(device).type != "cpu":
            raise RuntimeError(f"chorus backend: no backend for {device} tensors (the chorus backend takes CPU tensors)")
        return self

    # -- plumbing ----------------------------------------------------------
    def _collective(self, opts: Any, result: Any, start: Callable[[Callable[[Optional[BaseException]], None]], Any],
                    now: Callable[[], Any]) -> Any:
        """A collective as torch asks for it. Blocking (torch's own blocking
        calls set opts.asyncOp to False): `now()` on this thread once the
        collectives started before it are done, then a completed Work; no
        hand-off to a thread and back. Otherwise started on chorus's
        background thread, in call order."""
        if getattr(opts, "asyncOp", True):
            work = self._started(start, result)
            self._last_started = work.request
            return work
        self._drain()
        now()
        return self._completed(result)

    def _started(self, start: Callable[[Callable[[Optional[BaseException]], None]], Any], result: Any) -> Any:
        """Starts a non-blocking chorus call and returns a Work on its Future."""
        future, done = _future_with_callback(result)
        return ChorusWork(future, start(done))

    def _drain(self) -> None:
        """Waits for the collectives started on the background thread (they
        finish in order: the last one is enough). Their failures are their
        own Works' to report."""
        last, self._last_started = self._last_started, None
        if last is not None:
            try:
                last.wait()
            except Error:
                pass

    def _completed(self, result: Any) -> Any:
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(result)
        return ChorusWork(future)

    def _single(self, tensors: List[torch.Tensor], call: str) -> torch.Tensor:
        if len(tensors) != 1:
            raise InvalidArgument(f"chorus backend: {call} takes one tensor per process, got {len(tensors)}")
        _cpu_tensors(tensors, call)
        return tensors[0]

    # -- reductions --------------------------------------------------------
    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        tensor = self._single(tensors, "allreduce")
        op = _op_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "allreduce")
        if tensor.is_complex() and op not in ("sum", "avg"):
            raise InvalidArgument(f"chorus backend: allreduce of complex tensors with {op}")
        flat = _flat(tensor)
        return self._collective(opts, tensors,
                                lambda done: self._impl.iallreduce(flat, None, op, "auto", None, done),
                                lambda: self._impl.allreduce(flat, None, op, "auto", None))

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        _cpu_tensors(tensors, "allreduce_coalesced")
        op = _op_name(opts.reduceOp if opts is not None else dist.ReduceOp.SUM, "allreduce_coalesced")
        if not tensors:
            return self._completed(tensors)
        flats = [_flat(t) for t in tensors]

        def start(done: Callable[[Optional[BaseException]], None]) -> Any:
            # The background thread runs them in order, each holding its
            # tensor until done: the last one's completion is everyone's (an
            # earlier one's failure, a peer's, fails the last one too).
            for flat in flats[:-1]:
                self._impl.iallreduce(flat, None, op, "auto", None, None)
            return self._impl.iallreduce(flats[-1], None, op, "auto", None, done)

        def now() -> None:
            for flat in flats:
                self._impl.allreduce(flat, None, op, "auto", None)

        return self._collective(opts, tensors, start, now)

    def reduce(self, tensors: List[torch.Tensor], opts: Any) -> Any:
        tensor = self._single(tensors, "reduce")
        op = _op_name(opts.reduceOp, "reduce")
        self._drain()
        self._impl.reduce(_flat(tensor), opts.rootRank, None, op)
        return self._completed(tensors)

    def reduce_scatter(self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]],
                       opts: Any) -> Any:
        output = self._single(output_tensors, "reduce_scatter")
        if len(input_tensors) != 1 or len(input_tensors[0]) != self.size():
            raise InvalidArgument(f"chorus backend: reduce_scatter takes a list of {self.size()} input tensors")
        staged = torch.cat([t.reshape(-1) for t in input_tensors[0]])
        return self._reduce_scatter_into(output, staged, opts, "reduce_scatter")

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        _cpu_tensors([output, input], "reduce_scatter_tensor")
        return self._reduce_scatter_into(output, input, opts, "reduce_scatter_tensor")

    def reduce_scatter_tensor_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                                        opts: Any) -> Any:
        works = [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]
        for work in works:
            work.wait()
        return self._completed(outputs)

    def _reduce_scatter_into(self, output: torch.Tensor, input: torch.Tensor, opts: Any, call: str) -> Any:
        op = _op_name(opts.reduceOp, call)
        if input.numel() != output.numel() * self.size():
            raise InvalidArgument(f"chorus backend: {call}: input has {input.numel()} elements, "
                                  f"{self.size()} x output's {output.numel()} expected")
        source, target = _flat(input), _flat(output)
        return self._collective(opts, [output],
                                lambda done: self._impl.ireduce_scatter(source, target, op, "auto", done),
                                lambda: self._impl.reduce_scatter(source, target, op, "auto"))

    # -- data movement -----------------------------------------------------
    def broadcast(self, tensors: List[torch.Tensor], opts: Any) -> Any:
        tensor = self._single(tensors, "broadcast")
        root = opts.rootRank
        flat = _flat(tensor)
        return self._collective(opts, tensors, lambda done: self._impl.ibroadcast(flat, root, "auto", None, done),
                                lambda: self._impl.broadcast(flat, root, "auto", None))

    def allgather(self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor],
                  opts: Any = None) -> Any:
        tensor = self._single(input_tensors, "allgather")
        if len(output_tensors) != 1 or len(output_tensors[0]) != self.size():
            raise InvalidArgument(f"chorus backend: allgather takes a list of {self.size()} output tensors")
        outputs = output_tensors[0]
        for out in outputs:
            if out.numel() != tensor.numel() or out.dtype != tensor.dtype:
                raise InvalidArgument("chorus backend: allgather outputs must match the input's size and dtype")
        gathered = torch.empty((self.size(), *tensor.shape), dtype=tensor.dtype)
        mine, into = _flat(tensor.contiguous()), _flat(gathered)

        def scatter_back() -> None:
            for out, part in zip(outputs, gathered):
                out.copy_(part.reshape(out.shape))

        def then(failure: Optional[BaseException], done: Callable) -> None:
            if failure is None:
                scatter_back()
            done(failure)

        def now() -> None:
            self._impl.allgather(mine, into, "auto", None)
            scatter_back()

        return self._collective(
            opts, output_tensors,
            lambda done: self._impl.iallgather(mine, into, "auto", None, lambda failure: then(failure, done)), now)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        _cpu_tensors([output, input], "all_gather_into_tensor")
        if output.numel() != input.numel() * self.size():
            raise InvalidArgument(f"chorus backend: all_gather_into_tensor: output has {output.numel()} elements, "
                                  f"{self.size()} x input's {input.numel()} expected")
        mine, into = _flat(input), _flat(output)
        return self._collective(opts, [output], lambda done: self._impl.iallgather(mine, into, "auto", None, done),
                                lambda: self._impl.allgather(mine, into, "auto", None))

    def allgather_into_tensor_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                                        opts: Any = None) -> Any:
        works = [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]
        for work in works:
            work.wait()
        return self._completed(outputs)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: List[int],
                      input_split_sizes: List[int], opts: Any = None) -> Any:
        _cpu_tensors([output, input], "alltoall_single")
        if not output_split_sizes and not input_split_sizes:
            source, target = _flat(input), _flat(output)
            return self._collective(opts, [output], lambda done: self._impl.ialltoall(source, target, done),
                                    lambda: self._impl.alltoall(source, target))
        return self._alltoall_by_parts(self._split(output, output_split_sizes, "output"),
                                       self._split(input, input_split_sizes, "input"), [output])

    def alltoall(self, output_tensors: List[torch.Tensor], input_tensors: List[torch.Tensor],
                 opts: Any = None) -> Any:
        _cpu_tensors(output_tensors + input_tensors, "alltoall")
        if len(output_tensors) != self.size() or len(input_tensors) != self.size():
            raise InvalidArgument(f"chorus backend: alltoall takes {self.size()} input and output tensors")
        return self._alltoall_by_parts(output_tensors, input_tensors, output_tensors)

    def _split(self, tensor: torch.Tensor, sizes: List[int], role: str) -> List[torch.Tensor]:
        if not sizes:
            if tensor.shape[0] % self.size():
                raise InvalidArgument(f"chorus backend: alltoall_single: {role} of {tensor.shape[0]} rows does not "
                                      f"split into {self.size()} equal parts")
            sizes = [tensor.shape[0] // self.size()] * self.size()
        if len(sizes) != self.size() or sum(sizes) != tensor.shape[0]:
            raise InvalidArgument(f"chorus backend: alltoall_single: {role} split sizes {list(sizes)} do not cover "
                                  f"{tensor.shape[0]} rows in {self.size()} parts")
        return list(torch.split(tensor, list(sizes)))

    def _alltoall_by_parts(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], result: Any) -> Any:
        """Uneven blocks: every pair of parts as its own send and receive, all posted at once."""
        self._drain()
        me = self.rank()
        staged = [o if o.is_contiguous() else torch.empty_like(o) for o in outputs]
        requests = []
        for peer in range(self.size()):
            if peer == me:
                continue
            requests.append(self._impl.irecv(_flat(staged[peer]), peer, 0x7A11, None))
            requests.append(self._impl.isend(_flat(inputs[peer].contiguous()), peer, 0x7A11, None))
        staged[me].copy_(inputs[me])
        for request in requests:
            request.wait()
        for out, part in zip(outputs, staged):
            if out is not part:
                out.copy_(part)
        return self._completed(result)

    def gather(self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor], opts: Any) -> Any:
        tensor = self._single(input_tensors, "gather")
        root = opts.rootRank
        self._drain()
        if self.rank() != root:
            self._impl.gather(_flat(tensor.contiguous()), None, root)
            return self._completed(output_tensors)
        outputs = output_tensors[0]
        gathered = torch.empty((self.size(), *tensor.shape), dtype=tensor.dtype)
        self._impl.gather(_flat(tensor.contiguous()), _flat(gathered), root)
        for out, part in zip(outputs, gathered):
            out.copy_(part.reshape(out.shape))
        return self._completed(output_tensors)

    def gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        """gather into one tensor at the root (size x input's elements)."""
        _cpu_tensors([output, input], "gather_into_tensor")
        root = opts.rootRank
        at_root = self.rank() == root
        self._drain()
        if at_root and output.numel() != input.numel() * self.size():
            raise InvalidArgument(f"chorus backend: gather_into_tensor: output has {output.numel()} elements, "
                                  f"{self.size()} x input's {input.numel()} expected")
        self._impl.gather(_flat(input.contiguous()), _flat(output) if at_root else None, root)
        return self._completed([output])

    def scatter(self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]], opts: Any) -> Any:
        output = self._single(output_tensors, "scatter")
        root = opts.rootRank
        staged = None
        if self.rank() == root:
            staged = _flat(torch.stack([t.reshape(output.shape) for t in input_tensors[0]]).contiguous())
        received = output if output.is_contiguous() else torch.empty_like(output)
        self._drain()
        self._impl.scatter(staged, _flat(received), root)
        if received is not output:
            output.copy_(received)
        return self._completed(output_tensors)

    def barrier(self, opts: Any = None) -> Any:
        # Queued behind the collectives already started, as torch's barrier is.
        token = torch.zeros(1, dtype=torch.uint8)
        return self._collective(opts, None, lambda done: self._impl.iallreduce(token, None, "sum", "auto", None, done),
                                lambda: self._impl.allreduce(token, None, "sum", "auto", None))

    # torch 2.x names the single-tensor forms both ways.
    all_gather_single = _allgather_base
    reduce_scatter_single = _reduce_scatter_base
    all_to_all_single = alltoall_base
    gather_into_tensor = gather_single
    all_gather_single_coalesced = allgather_into_tensor_coalesced
    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    # -- point to point ----------------------------------------------------
    def send(self, tensors: List[torch.Tensor], dst: int, tag: int) -> Any:
        tensor = self._single(tensors, "send")
        return self._started(lambda done: self._impl.isend(_flat(tensor), dst, tag, done), tensors)

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int) -> Any:
        tensor = self._single(tensors, "recv")
        return self._started(lambda done: self._impl.irecv(_flat(tensor), src, tag, done), tensors)

    def recv_anysource(self, tensors: List[torch.Tensor], tag: int) -> Any:
        raise NotImplementedError("chorus backend: recv from any source is not supported; name the sender (src=)")

    # -- calls chorus does not offer -----------------------------------------
    def _unsupported(name: str) -> Callable[..., Any]:  # noqa: N805 - a method factory
        def refuse(self: "ProcessGroupChorus", *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError(f"chorus backend: {name} is not supported")

        refuse.__name__ = name
        return refuse

    allgather_coalesced = _unsupported("allgather_coalesced")
    monitored_barrier = _unsupported("monitored_barrier")
    del _unsupported


def _create(store: Any, rank: int, size: int, timeout: timedelta) -> ProcessGroupChorus:
    return ProcessGroupChorus(store, rank, size, timeout)


_opened = 0  # communicators opened through a store: the same count on every rank, for fresh keys


def communicator_for(group: Optional[Any] = None) -> Communicator:
    """A chorus communicator over the ranks of `group` (default: the default
    group): the chorus backend's own, or, for another backend's group
    (Gloo's), a new one whose store address travels through torch's store.
    Collective over the group."""
    global _opened
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if isinstance(pg, ProcessGroupChorus):
        return pg.communicator
    _opened += 1
    store = dist.PrefixStore(f"chorus-opened/{pg.group_name}/{_opened}/", dist.distributed_c10d._get_default_store())
    return _connect_through(store, pg.rank(), pg.size(), dist.distributed_c10d.default_pg_timeout)


def communicator_of(group: Optional[Any] = None) -> Communicator:
    """The chorus communicator behind a process group made with the chorus backend."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupChorus):
        raise InvalidArgument(f"the process group is {type(pg).__name__}, not the chorus backend's")
    return pg.communicator


if "chorus" not in getattr(dist.Backend, "_plugins", {}) and "CHORUS" not in getattr(dist.Backend, "_plugins", {}):
    dist.Backend.register_backend("chorus", _create, devices=["cpu"])

from . import hooks  # noqa: E402 - after the backend, which the hooks use
