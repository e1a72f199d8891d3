"""ProcessGroupChorus: the torch process group whose collectives are
chorus's."""
from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any, Callable, List, Optional

import torch
import torch.distributed as dist

from .. import _chorus
from ..communicator import Communicator
from ..errors import Error, InvalidArgument
from .arguments import _ON_CPU, _flat, _premultiplied, _reduction
from .failures import _monitored_barrier_wording, torch_error
from .rendezvous import _connect_through
from .route import _Route
from .works import ChorusWork, _GpuWork, _future_with_callback


class _Named(torch._C._distributed_c10d.Backend):
    """The C++ backend registered on a chorus group: it holds the group's
    name for torch and runs nothing (every call is the group's own method)."""

    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "chorus"


def _name_holder(rank: int, size: int) -> Any:
    """A _Named where torch lets Python subclass its Backend (2.13 on); in an
    older torch, its own FakeProcessGroup, which likewise only holds the name
    (torch keeps a group's name in its backends, and calls the group's own
    methods, never the backend's)."""
    try:
        return _Named(rank, size)
    except TypeError:
        fake = torch._C._distributed_c10d.FakeProcessGroup
        return getattr(fake, "_create_internal", fake)(rank, size)


# Backend's calls (torch asks them of _get_backend(device), which for a
# chorus group is the group) that chorus does not offer.
_NOT_OFFERED = {name for name in dir(torch._C._distributed_c10d.Backend)
                if not name.startswith("__") and not hasattr(dist.ProcessGroup, name)} - {
    "supports_splitting", "supports_shrinking", "_supports_time_estimate", "Options", "options", "mem_allocator",
    "supports_tensor_alloc", "eager_connect_single_device", "get_error", "_set_sequence_number_for_group",
    "_set_group_uid", "allreduce_sparse", "supports_coalescing"}


def _not_offered(name: str, *args: Any, **kwargs: Any) -> Any:
    raise RuntimeError(f"Backend chorus does not support {name}")


class ProcessGroupChorus(dist.ProcessGroup):
    """A torch process group whose collectives are chorus's."""

    def __init__(self, store: Any, rank: int, size: int, timeout: timedelta) -> None:
        super().__init__(rank, size)
        self._store = store
        self._collectives = 0  # started through the group: torch's sequence number for it
        self._comm = _connect_through(store, rank, size, timeout)
        self._impl = self._comm._impl
        self._timeout = timeout
        self._last_started: Any = None  # the last collective started on the background thread
        self._gpus: Any = None  # chorus.nccl's communicator for CUDA tensors, made at the first call on them
        self._gpu_index = -1  # its device
        self._on_cpu = _Route(self._impl)  # where every call on CPU tensors goes
        self._stream_handle, self._stream = None, None  # torch's current stream at the last call on CUDA tensors
        # torch keeps a group's name and devices in the C++ backends
        # registered on it; this group's calls are its own methods, and a
        # backend that only names itself stands for it there (so the group
        # has a name destroy_process_group can unregister, and the devices
        # monitored_barrier and DDP ask for).
        self._set_default_backend(dist.ProcessGroup.BackendType.CUSTOM)
        for device in ("cpu", "cuda"):
            self._register_backend(torch.device(device), dist.ProcessGroup.BackendType.CUSTOM, _name_holder(rank, size))

    # -- what torch asks of every group -------------------------------------
    def getBackendName(self) -> str:  # noqa: N802 - torch's name
        return "chorus"

    def shutdown(self) -> None:
        """destroy_process_group: finishes what was started, leaves the job."""
        if self._gpus is not None:
            self._gpus.close()
        self._comm.close()

    abort = shutdown

    @property
    def communicator(self) -> Communicator:
        return self._comm

    @property
    def nccl_communicator(self) -> Any:
        """The NCCL communicator CUDA tensors go through (chorus.nccl), or None before the first call on them."""
        return self._gpus

    # torch asks a group for its per-device backend (batch_isend_irecv asks
    # it whether it coalesces): this group is its own, for CPU and CUDA
    # tensors. It does not coalesce as torch means it: its CUDA sends and
    # receives are queued and started together by the first wait.
    supports_coalescing = False
    # torch's ProcessGroup answers these feature probes from its default
    # backend, which for this group is itself: so the answers are here
    # (else the property asks itself again, without end). Reconfiguring and
    # torch's own windows are not offered (chorus.window is chorus's).
    supports_window = False
    supports_reconfigure = False
    # torch also asks _get_backend(device) (this group) what a Backend
    # answers: splitting, shrinking, time estimates, tensor allocation,
    # options. The rest of Backend's calls are below (_not_offered).
    supports_splitting = False
    supports_shrinking = False
    _supports_time_estimate = False
    Options = torch._C._distributed_c10d.Backend.Options

    @property
    def options(self) -> Any:
        made = self.Options("chorus", self._timeout)
        made.group_name = self.group_name
        return made

    @property
    def mem_allocator(self) -> Any:
        raise RuntimeError("Backend chorus does not support getMemAllocator")

    def supports_tensor_alloc(self, device: Any) -> bool:
        return False

    def eager_connect_single_device(self, device: Any = None) -> None:
        """Nothing to do: chorus connects its ranks when the group is made."""

    def get_error(self) -> Any:
        return torch._C._distributed_c10d.ErrorType.SUCCESS

    def _set_sequence_number_for_group(self) -> None:
        """Nothing to do: the count starts at the group's first call on every rank."""

    def _set_group_uid(self, uid: Any) -> None:
        self._uid = uid

    def allreduce_sparse(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        return self.allreduce(tensors, opts)

    def __getattr__(self, name: str) -> Any:
        # Only for names not found the usual way: Backend's calls that this
        # group does not offer raise as Gloo's unsupported ones do.
        if name in _NOT_OFFERED:
            return functools.partial(_not_offered, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def get_group_store(self) -> Any:
        """The store the group was made with (torch's, prefixed for the group)."""
        return self._store

    def _get_sequence_number_for_group(self) -> int:
        """The collectives started through the group so far: the same on every rank that made the same calls."""
        return self._collectives

    def _enable_collectives_timing(self) -> None:
        """Nothing to switch on: chorus's flight recorder times every call (chorus.record)."""

    def _get_backend(self, device: Any) -> "ProcessGroupChorus":
        if torch.device(device).type not in ("cpu", "cuda"):
            raise RuntimeError(f"chorus backend: no backend for {device} tensors (the chorus backend takes CPU and "
                               "CUDA tensors)")
        return self

    # -- plumbing ----------------------------------------------------------
    def _route(self, tensors: List[torch.Tensor], call: str) -> _Route:
        """Where a call on `tensors` runs: CPU tensors on the chorus
        communicator, CUDA tensors (all on one device) on the NCCL one."""
        if len(tensors) == 1:  # most calls: no set of devices to make
            device = tensors[0].device
            if device.type == "cpu":
                return self._on_cpu
        else:
            devices = {t.device for t in tensors}
            if not devices or devices == _ON_CPU:
                return self._on_cpu
            if len(devices) > 1:
                raise InvalidArgument(f"chorus backend: {call} got tensors on {sorted(str(d) for d in devices)}; it "
                                      "takes CPU tensors, or CUDA tensors on the process's one device")
            device = next(iter(devices))
        if device.type != "cuda":
            raise InvalidArgument(f"chorus backend: {call} got a tensor on {device}; it takes CPU tensors, or CUDA "
                                  "tensors on the process's one device")
        gpus = self._nccl_for(device, call)
        return _Route(gpus._impl, device, gpus, self._current_stream(self._gpu_index))

    def _current_stream(self, index: int) -> torch.cuda.Stream:
        """torch's current stream of cuda:`index`: the Stream object made once
        per stream (torch.cuda.current_stream makes one a call, which costs
        more than the raw handle that tells whether it changed)."""
        raw = torch._C._cuda_getCurrentRawStream(index)
        if raw != self._stream_handle:
            self._stream_handle, self._stream = raw, torch.cuda.current_stream(index)
        return self._stream

    def _nccl_for(self, device: torch.device, call: str) -> Any:
        """The group's NCCL communicator on `device`, made (collectively) at the first call on CUDA tensors."""
        index = device.index if device.index is not None else torch.cuda.current_device()
        if self._gpus is None:
            from .. import nccl

            self._drain()  # connecting runs on the chorus communicator, which the background thread may be using
            self._gpus = nccl.connect(self._comm, index, synchronous=False)
            self._gpu_index = self._gpus.device
        if self._gpu_index != index:
            raise InvalidArgument(f"chorus backend: {call} got a tensor on cuda:{index}, and the group's NCCL "
                                  f"communicator is on cuda:{self._gpu_index} (one GPU per process)")
        return self._gpus

    def _collective(self, opts: Any, result: Any, route: _Route,
                    start: Callable[[Callable[[Optional[BaseException]], None]], Any], now: Callable[[], Any]) -> Any:
        """A collective as torch asks for it. CUDA tensors: `now()`
        enqueued on torch's current stream, and a Work on that stream.
        Blocking (torch's own blocking calls set opts.asyncOp to False):
        `now()` on this thread once the collectives started before it are
        done, then a completed Work; no hand-off to a thread and back.
        Otherwise started on chorus's background thread, in call order."""
        if not route.on_gpu and getattr(opts, "asyncOp", True):
            work = self._started(start, result)
            self._last_started = work.request
            return work
        return self._now(route, result, now)

    def _now(self, route: _Route, result: Any, now: Callable[[], Any]) -> ChorusWork:
        """`now()` run (CPU tensors, after what the background thread has
        started) or enqueued (CUDA tensors), and its Work."""
        if not route.on_gpu:
            self._drain()
        with route.ordered():
            now()
        return route.completed(result)

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

    def _single(self, tensors: List[torch.Tensor], call: str) -> torch.Tensor:
        if len(tensors) != 1:
            raise InvalidArgument(f"chorus backend: {call} takes one tensor per process, got {len(tensors)}")
        return tensors[0]

    # -- reductions --------------------------------------------------------
    def allreduce(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        tensor = self._single(tensors, "allreduce")
        op, factor = _reduction(opts, "allreduce")
        if tensor.is_sparse:
            return self._sparse_allreduce(tensor, op)
        if tensor.is_complex() and op not in ("sum", "avg"):
            raise InvalidArgument(f"chorus backend: allreduce of complex tensors with {op}")
        if factor is not None:
            op = "sum"
            _premultiplied(tensor, factor, in_place=True)
        flat = _flat(tensor)
        route = self._route(tensors, "allreduce")
        return self._collective(opts, tensors, route,
                                lambda done: route.impl.iallreduce(flat, None, op, "auto", None, done),
                                lambda: route.impl.allreduce(flat, None, op, "auto", None))

    def _sparse_allreduce(self, tensor: torch.Tensor, op: str) -> Any:
        """The sum of every rank's COO tensor, coalesced, into `tensor` on every
        rank (as Gloo): each rank's indices and values are gathered (padded to
        the largest count) and summed in rank order, so every rank gets the
        same bits. CUDA ones go through the host."""
        if op != "sum":
            raise InvalidArgument(f"chorus backend: allreduce of sparse tensors sums; {op} is not supported")
        self._drain()
        mine = tensor.coalesce().cpu()
        indices, values = mine.indices(), mine.values()
        counts = torch.zeros(self.size(), dtype=torch.int64)
        self._impl.allgather(torch.tensor([values.shape[0]], dtype=torch.int64), counts, "auto", None)
        largest = int(counts.max())
        padded_indices = torch.zeros((indices.shape[0], largest), dtype=torch.int64)
        padded_indices[:, :indices.shape[1]] = indices
        padded_values = torch.zeros((largest, *values.shape[1:]), dtype=values.dtype)
        padded_values[:values.shape[0]] = values
        all_indices = torch.empty((self.size(), *padded_indices.shape), dtype=torch.int64)
        all_values = torch.empty((self.size(), *padded_values.shape), dtype=values.dtype)
        self._impl.allgather(padded_indices.contiguous(), all_indices, "auto", None)
        self._impl.allgather(_flat(padded_values.contiguous()), _flat(all_values), "auto", None)
        kept = [slice(0, int(count)) for count in counts]
        summed = torch.sparse_coo_tensor(torch.cat([all_indices[r][:, kept[r]] for r in range(self.size())], dim=1),
                                         torch.cat([all_values[r][kept[r]] for r in range(self.size())]),
                                         tensor.shape).coalesce()
        tensor.copy_(summed.to(tensor.device))
        return _Route(self._impl).completed([tensor])

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> Any:
        route = self._route(tensors, "allreduce_coalesced")
        op, factor = _reduction(opts, "allreduce_coalesced")
        if not tensors:
            return route.completed(tensors)
        if factor is not None:
            op = "sum"
            for tensor in tensors:
                _premultiplied(tensor, factor, in_place=True)
        flats = [_flat(t) for t in tensors]

        def start(done: Callable[[Optional[BaseException]], None]) -> Any:
            # The background thread runs them in order, each holding its
            # tensor until done: the last one's completion is everyone's (an
            # earlier one's failure, a peer's, fails the last one too).
            for flat in flats[:-1]:
                route.impl.iallreduce(flat, None, op, "auto", None, None)
            return route.impl.iallreduce(flats[-1], None, op, "auto", None, done)

        def now() -> None:
            for flat in flats:
                route.impl.allreduce(flat, None, op, "auto", None)

        return self._collective(opts, tensors, route, start, now)

    def reduce(self, tensors: List[torch.Tensor], opts: Any) -> Any:
        tensor = self._single(tensors, "reduce")
        op, factor = _reduction(opts, "reduce")
        route = self._route(tensors, "reduce")
        # PREMUL_SUM: the products of a copy, reduced into the tensor at the root.
        given = tensor if factor is None else _premultiplied(tensor, factor, in_place=False)
        return self._now(route, tensors, lambda: route.impl.reduce(_flat(given), opts.rootRank, _flat(tensor),
                                                                   "sum" if factor is not None else op))

    def reduce_scatter(self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]],
                       opts: Any) -> Any:
        output = self._single(output_tensors, "reduce_scatter")
        if len(input_tensors) != 1 or len(input_tensors[0]) != self.size():
            raise InvalidArgument(f"chorus backend: reduce_scatter takes a list of {self.size()} input tensors")
        staged = torch.cat([t.reshape(-1) for t in input_tensors[0]])
        return self._reduce_scatter_into(output, staged, opts, "reduce_scatter")

    def _reduce_scatter_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        return self._reduce_scatter_into(output, input, opts, "reduce_scatter_tensor")

    def reduce_scatter_tensor_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                                        opts: Any) -> Any:
        route = self._route(outputs + inputs, "reduce_scatter_tensor_coalesced")
        for work in [self._reduce_scatter_base(o, i, opts) for o, i in zip(outputs, inputs)]:
            work.wait()
        return route.completed(outputs)

    def _reduce_scatter_into(self, output: torch.Tensor, input: torch.Tensor, opts: Any, call: str) -> Any:
        op, factor = _reduction(opts, call)
        if input.numel() != output.numel() * self.size():
            raise InvalidArgument(f"chorus backend: {call}: input has {input.numel()} elements, "
                                  f"{self.size()} x output's {output.numel()} expected")
        if factor is not None:  # the products of a copy: the caller's input stays as it was
            op, input = "sum", _premultiplied(input, factor, in_place=False)
        source, target = _flat(input), _flat(output)
        route = self._route([output, input], call)
        return self._collective(opts, [output], route,
                                lambda done: route.impl.ireduce_scatter(source, target, op, "auto", done),
                                lambda: route.impl.reduce_scatter(source, target, op, "auto"))

    # -- data movement -----------------------------------------------------
    def broadcast(self, tensors: List[torch.Tensor], opts: Any) -> Any:
        tensor = self._single(tensors, "broadcast")
        root = opts.rootRank
        flat = _flat(tensor)
        route = self._route(tensors, "broadcast")
        return self._collective(opts, tensors, route,
                                lambda done: route.impl.ibroadcast(flat, root, "auto", None, done),
                                lambda: route.impl.broadcast(flat, root, "auto", None))

    def allgather(self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor],
                  opts: Any = None) -> Any:
        tensor = self._single(input_tensors, "allgather")
        if len(output_tensors) != 1 or len(output_tensors[0]) != self.size():
            raise InvalidArgument(f"chorus backend: allgather takes a list of {self.size()} output tensors")
        outputs = output_tensors[0]
        for out in outputs:
            if out.numel() != tensor.numel() or out.dtype != tensor.dtype:
                raise InvalidArgument("chorus backend: allgather outputs must match the input's size and dtype")
        route = self._route([tensor, *outputs], "allgather")
        gathered = route.empty((self.size(), *tensor.shape), tensor.dtype)

        def scatter_back() -> None:
            for out, part in zip(outputs, gathered):
                out.copy_(part.reshape(out.shape))

        return self._allgather_then(opts, output_tensors, route, _flat(tensor.contiguous()), _flat(gathered),
                                    scatter_back)

    def _allgather_then(self, opts: Any, result: Any, route: _Route, mine: torch.Tensor, into: torch.Tensor,
                        after: Callable[[], None]) -> Any:
        """An allgather of `mine` into `into`, then after() (copying the parts
        where the caller wants them), blocking or not as torch asks."""
        def then(failure: Optional[BaseException], done: Callable) -> None:
            if failure is None:
                after()
            done(failure)

        def now() -> None:
            route.impl.allgather(mine, into, "auto", None)
            after()

        return self._collective(
            opts, result, route,
            lambda done: route.impl.iallgather(mine, into, "auto", None, lambda failure: then(failure, done)), now)

    def _allgather_base(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> Any:
        route = self._route([output, input], "all_gather_into_tensor")
        if output.numel() != input.numel() * self.size():
            raise InvalidArgument(f"chorus backend: all_gather_into_tensor: output has {output.numel()} elements, "
                                  f"{self.size()} x input's {input.numel()} expected")
        mine, into = _flat(input), _flat(output)
        return self._collective(opts, [output], route,
                                lambda done: route.impl.iallgather(mine, into, "auto", None, done),
                                lambda: route.impl.allgather(mine, into, "auto", None))

    def allgather_coalesced(self, output_lists: List[List[torch.Tensor]], inputs: List[torch.Tensor],
                            opts: Any = None) -> Any:
        """Every rank's list of tensors into every rank's output lists, in one
        allgather of their bytes (any sizes and types, empty ones included)."""
        route = self._route(inputs + [t for outputs in output_lists for t in outputs], "all_gather_coalesced")
        if len(output_lists) != self.size() or any(len(outputs) != len(inputs) for outputs in output_lists):
            raise InvalidArgument(f"chorus backend: all_gather_coalesced takes {self.size()} output lists of "
                                  f"{len(inputs)} tensors")
        packed = torch.cat([_flat(t).contiguous().reshape(-1).view(torch.uint8) for t in inputs]) if inputs \
            else route.empty(0, torch.uint8)
        gathered = route.empty((self.size(), packed.numel()), torch.uint8)

        def unpack() -> None:
            for rank, outputs in enumerate(output_lists):
                offset = 0
                for out in outputs:
                    length = out.numel() * out.element_size()
                    out.copy_(gathered[rank, offset:offset + length].clone().view(out.dtype).reshape(out.shape))
                    offset += length

        return self._allgather_then(opts, output_lists, route, packed, gathered, unpack)

    def allgather_into_tensor_coalesced(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor],
                                        opts: Any = None) -> Any:
        route = self._route(outputs + inputs, "all_gather_into_tensor_coalesced")
        for work in [self._allgather_base(o, i, opts) for o, i in zip(outputs, inputs)]:
            work.wait()
        return route.completed(outputs)

    def alltoall_base(self, output: torch.Tensor, input: torch.Tensor, output_split_sizes: List[int],
                      input_split_sizes: List[int], opts: Any = None) -> Any:
        route = self._route([output, input], "alltoall_single")
        if not output_split_sizes and not input_split_sizes:
            source, target = _flat(input), _flat(output)
            return self._collective(opts, [output], route, lambda done: route.impl.ialltoall(source, target, done),
                                    lambda: route.impl.alltoall(source, target))
        return self._alltoall_by_parts(self._split(output, output_split_sizes, "output"),
                                       self._split(input, input_split_sizes, "input"), [output], route)

    def alltoall(self, output_tensors: List[torch.Tensor], input_tensors: List[torch.Tensor],
                 opts: Any = None) -> Any:
        route = self._route(output_tensors + input_tensors, "alltoall")
        if len(output_tensors) != self.size() or len(input_tensors) != self.size():
            raise InvalidArgument(f"chorus backend: alltoall takes {self.size()} input and output tensors")
        return self._alltoall_by_parts(output_tensors, input_tensors, output_tensors, route)

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

    def _alltoall_by_parts(self, outputs: List[torch.Tensor], inputs: List[torch.Tensor], result: Any,
                           route: _Route) -> Any:
        """Uneven blocks: every pair of parts as its own send and receive, all
        posted at once (CUDA tensors: as one NCCL group)."""
        me = self.rank()
        staged = [o if o.is_contiguous() else torch.empty_like(o) for o in outputs]

        def exchange() -> None:
            requests = []
            for peer in range(self.size()):
                if peer == me:
                    continue
                if route.on_gpu:
                    route.impl.queue_recv(_flat(staged[peer]), peer)
                    route.impl.queue_send(_flat(inputs[peer].contiguous()), peer)
                else:
                    requests.append(route.impl.irecv(_flat(staged[peer]), peer, 0x7A11, None))
                    requests.append(route.impl.isend(_flat(inputs[peer].contiguous()), peer, 0x7A11, None))
            staged[me].copy_(inputs[me])
            if route.on_gpu:
                route.impl.post()
            for request in requests:
                request.wait()
            for out, part in zip(outputs, staged):
                if out is not part:
                    out.copy_(part)

        return self._now(route, result, exchange)

    def gather(self, output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor], opts: Any) -> Any:
        tensor = self._single(input_tensors, "gather")
        root = opts.rootRank
        outputs = output_tensors[0] if self.rank() == root else []
        route = self._route([tensor, *outputs], "gather")

        def run() -> None:
            if self.rank() != root:
                route.impl.gather(_flat(tensor.contiguous()), None, root)
                return
            gathered = route.empty((self.size(), *tensor.shape), tensor.dtype)
            route.impl.gather(_flat(tensor.contiguous()), _flat(gathered), root)
            for out, part in zip(outputs, gathered):
                out.copy_(part.reshape(out.shape))

        return self._now(route, output_tensors, run)

    def gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any) -> Any:
        """gather into one tensor at the root (size x input's elements)."""
        root = opts.rootRank
        at_root = self.rank() == root
        route = self._route([output, input] if at_root else [input], "gather_into_tensor")
        if at_root and output.numel() != input.numel() * self.size():
            raise InvalidArgument(f"chorus backend: gather_into_tensor: output has {output.numel()} elements, "
                                  f"{self.size()} x input's {input.numel()} expected")
        return self._now(route, [output], lambda: route.impl.gather(_flat(input.contiguous()),
                                                                    _flat(output) if at_root else None, root))

    def scatter(self, output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]], opts: Any) -> Any:
        output = self._single(output_tensors, "scatter")
        root = opts.rootRank
        inputs = input_tensors[0] if self.rank() == root else []
        route = self._route([output, *inputs], "scatter")

        def run() -> None:
            staged = _flat(torch.stack([t.reshape(output.shape) for t in inputs]).contiguous()) if inputs else None
            received = output if output.is_contiguous() else torch.empty_like(output)
            route.impl.scatter(staged, _flat(received), root)
            if received is not output:
                output.copy_(received)

        return self._now(route, output_tensors, run)

    def barrier(self, opts: Any = None) -> Any:
        # Queued behind the collectives already started, as torch's barrier
        # is; the work on CUDA tensors enqueued before it is done first.
        if self._gpus is not None:
            self._gpus.synchronize()
        return self._collective(opts, None, _Route(self._impl), lambda done: self._impl.ibarrier(done),
                                self._impl.barrier)

    def monitored_barrier(self, timeout: Optional[timedelta] = None, wait_all_ranks: bool = False) -> None:
        """Rank 0 waits up to `timeout` (default: the group's) for every rank and
        raises naming the first that did not come (every one with
        wait_all_ranks); the others raise naming rank 0, or hearing from it."""
        limit = (timeout if timeout is not None else self._timeout).total_seconds()
        self._drain()
        try:
            self._impl.monitored_barrier(limit, wait_all_ranks)
        except Error as failure:
            raise torch_error(failure, _monitored_barrier_wording(self.rank(), limit, failure)) from failure

    # -- point to point ----------------------------------------------------
    def send(self, tensors: List[torch.Tensor], dst: int, tag: int) -> Any:
        tensor = self._single(tensors, "send")
        route = self._route(tensors, "send")
        if route.on_gpu:
            return _GpuWork(tensors, route.stream, route.gpus, post=route.gpus.isend(_flat(tensor), dst, tag).wait)
        return self._started(lambda done: self._impl.isend(_flat(tensor), dst, tag, done), tensors)

    def recv(self, tensors: List[torch.Tensor], src: int, tag: int) -> Any:
        tensor = self._single(tensors, "recv")
        route = self._route(tensors, "recv")
        if route.on_gpu:
            return _GpuWork(tensors, route.stream, route.gpus, post=route.gpus.irecv(_flat(tensor), src, tag).wait)
        return self._started(lambda done: self._impl.irecv(_flat(tensor), src, tag, done), tensors)

    def recv_anysource(self, tensors: List[torch.Tensor], tag: int) -> Any:
        """A receive from whichever rank sends with `tag` first; the Work's
        source_rank() names it."""
        tensor = self._single(tensors, "recv")
        if tensor.device.type != "cpu":
            raise InvalidArgument("chorus backend: a receive from any source takes a CPU tensor (NCCL has none)")
        return self._started(lambda done: self._impl.irecv_any(_flat(tensor), tag, done), tensors)


# Every call torch makes of the group, in one wrapper (it is paid on every
# call): recorded by torch's profilers as "chorus:<method>" and by chorus's
# flight recorder (chorus.record, chorus-trace report) under torch's name for
# the call, whatever chorus calls it runs (a method called by another keeps
# the outer one's name); chorus errors raised as torch's (torch_error).
_RECORDED_AS = {"_reduce_scatter_base": "reduce_scatter_tensor", "_allgather_base": "allgather_into_tensor",
                "gather_single": "gather"}


def _as_backend_call(method: Callable[..., Any], name: str) -> Callable[..., Any]:
    recorded_as = _RECORDED_AS.get(name, name)

    counted = name not in ("send", "recv", "recv_anysource", "monitored_barrier")

    @functools.wraps(method)
    def call(self: ProcessGroupChorus, *args: Any, **kwargs: Any) -> Any:
        outer = _chorus.record_as(recorded_as)
        if outer:
            _chorus.record_as(outer)
        elif counted:
            self._collectives += 1
        try:
            if torch._C._autograd._profiler_enabled():
                with torch.autograd.profiler.record_function(f"chorus:{name}"):
                    return method(self, *args, **kwargs)
            return method(self, *args, **kwargs)
        except Error as failure:
            translated = torch_error(failure)
            if translated is failure:
                raise
            raise translated from failure
        finally:
            _chorus.record_as(outer)

    return call


for _name in ("allreduce", "allreduce_coalesced", "reduce", "reduce_scatter", "_reduce_scatter_base",
              "reduce_scatter_tensor_coalesced", "broadcast", "allgather", "allgather_coalesced", "_allgather_base",
              "allgather_into_tensor_coalesced", "alltoall_base", "alltoall", "gather", "gather_single", "scatter",
              "barrier", "monitored_barrier", "send", "recv", "recv_anysource"):
    setattr(ProcessGroupChorus, _name, _as_backend_call(getattr(ProcessGroupChorus, _name), _name))
del _name
# torch 2.x names the single-tensor forms both ways (the wrapped methods).
for _alias, _name in (("all_gather_single", "_allgather_base"), ("reduce_scatter_single", "_reduce_scatter_base"),
                      ("all_to_all_single", "alltoall_base"), ("gather_into_tensor", "gather_single"),
                      ("all_gather_single_coalesced", "allgather_into_tensor_coalesced"),
                      ("reduce_scatter_single_coalesced", "reduce_scatter_tensor_coalesced")):
    setattr(ProcessGroupChorus, _alias, getattr(ProcessGroupChorus, _name))
del _alias, _name
