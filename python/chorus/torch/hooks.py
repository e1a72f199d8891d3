"""DDP communication hooks that average gradients through chorus's codecs.

    from chorus.torch import hooks
    state = hooks.State(codec="int8")                  # collective: every rank, after init_process_group
    ddp.register_comm_hook(state, hooks.compressed_allreduce)
    # or: ddp.register_comm_hook(hooks.State("onebit"), hooks.onebit)

Each bucket is averaged by chorus's compressed allreduce; with error
feedback (the default) the part a codec lost is kept per bucket and added
to the same bucket's next gradient. A CUDA bucket of a chorus group goes
through the group's NCCL communicator, encoded and decoded on the GPU by
chorus's kernels (its residual stays there), enqueued on torch's current
stream; of another backend's group (Gloo's), through chorus's communicator,
staged through the host.

PowerSGD (rank-r factors of each gradient matrix, for slow links)::

    ddp.register_comm_hook(hooks.PowerSGDState(rank=2), hooks.powersgd)

Each parameter's gradient is a matrix (its first dimension by the rest; a
vector or a matrix too small to gain is averaged exactly), with error
feedback and warm-started factors kept per bucket (chorus.PowerSGD, the C++
compressed/powersgd.hpp); two allreduces per bucket of (rows + cols) r
floats a matrix. It runs on the host: a CUDA bucket is copied there and
back. The DDP process group may be the
chorus backend's (its communicator is used) or any other, Gloo's say: then
the hook's state opens a chorus communicator through the default group's
store, and only the gradients travel by chorus.
"""

# No `from __future__ import annotations` here: DDP's register_comm_hook
# compares the hooks' annotations with dist.GradBucket and
# torch.futures.Future[torch.Tensor] themselves, not with their names.
from typing import Any, Dict, Optional, Tuple

import torch
import torch.distributed as dist

from .. import _chorus
from .communicators import communicator_for
from .process_group import ProcessGroupChorus
from .route import _Route
from .works import _call, _future_with_callback

__all__ = ["PowerSGDState", "State", "compressed_allreduce", "fp16", "bf16", "int8", "onebit", "powersgd"]


class State:
    """What a hook keeps between steps: the codec, the chorus communicator,
    and one error-feedback residual per bucket."""

    def __init__(self, codec: str = "int8", *, error_feedback: bool = True, block: Optional[int] = None,
                 process_group: Optional[Any] = None) -> None:
        self.codec = _chorus.Codec(codec, block)
        self.error_feedback = error_feedback
        self.group = process_group if process_group is not None else dist.distributed_c10d._get_default_group()
        self.comm = communicator_for(process_group)
        self._residuals: Dict[Tuple[int, int], _chorus.ErrorFeedback] = {}

    def wire_for(self, bucket: dist.GradBucket) -> Any:
        """The codec, or this bucket's error feedback (by index and size: DDP
        rebuilds its buckets after the first step)."""
        if not self.error_feedback:
            return self.codec
        key = (bucket.index(), bucket.buffer().numel())
        kept = self._residuals.get(key)
        if kept is None:
            kept = self._residuals[key] = _chorus.ErrorFeedback(self.codec)
        return kept


def compressed_allreduce(state: State, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Averages the bucket's gradients through the state's codec; float32
    buckets only (others are averaged exactly)."""
    buffer = bucket.buffer()
    wire = state.wire_for(bucket) if buffer.dtype == torch.float32 else None
    if buffer.is_cuda and isinstance(state.group, ProcessGroupChorus):
        route = state.group._route([buffer], "compressed_allreduce")
        with _call("allreduce"), route.ordered():
            route.impl.allreduce(buffer, None, "avg", "auto", wire)
        return route.completed(buffer).get_future()
    future, done = _future_with_callback(buffer, [buffer.device] if buffer.is_cuda else None)
    with _Route.current(state.comm._impl, buffer.device if buffer.is_cuda else None).ordered():
        state.comm._impl.iallreduce(buffer, None, "avg", "auto", wire, done)
    return future


def _with(codec: str):
    def hook(state: State, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        if state.codec.name != codec:
            raise ValueError(f"the {codec} hook was given a State for {state.codec.name}: State({codec!r})")
        return compressed_allreduce(state, bucket)

    hook.__name__ = codec
    hook.__doc__ = f"compressed_allreduce, checked to run {codec}: register with State({codec!r})."
    return hook


fp16 = _with("fp16")
bf16 = _with("bf16")
int8 = _with("int8")
onebit = _with("onebit")


def matrix_shapes(tensors: Any) -> "list[tuple[int, int]]":
    """Each tensor as PowerSGD sees it: (first dimension, the rest), or (1, n) for a vector or a scalar."""
    return [(int(t.shape[0]), t.numel() // int(t.shape[0])) if t.dim() >= 2 and t.shape[0] > 0 else (1, t.numel())
            for t in tensors]


class PowerSGDState:
    """What the PowerSGD hook keeps: the rank r, the chorus communicator, and
    one chorus.PowerSGD per bucket (its factors and errors between steps)."""

    def __init__(self, rank: int = 2, *, error_feedback: bool = True, warm_start: bool = True, seed: int = 0,
                 process_group: Optional[Any] = None) -> None:
        if rank < 1:
            raise ValueError("PowerSGD's rank is at least 1")
        self.rank, self.error_feedback, self.warm_start, self.seed = rank, error_feedback, warm_start, seed
        self.comm = communicator_for(process_group)
        self._states: Dict[Tuple[int, Tuple[Tuple[int, int], ...]], _chorus.PowerSGD] = {}

    def state_for(self, bucket: dist.GradBucket) -> "_chorus.PowerSGD":
        """This bucket's PowerSGD, by index and shapes: DDP rebuilds its buckets after the first step, in
        another order."""
        shapes = matrix_shapes(bucket.parameters())
        key = (bucket.index(), tuple(shapes))
        kept = self._states.get(key)
        if kept is None:
            kept = self._states[key] = _chorus.PowerSGD(shapes, self.rank, self.error_feedback, self.warm_start,
                                                        self.seed)
        return kept


def powersgd(state: PowerSGDState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """Averages the bucket's gradients through PowerSGD at the state's rank;
    float32 buckets only (others are averaged exactly)."""
    buffer = bucket.buffer()
    future, finished = _future_with_callback(buffer, [buffer.device] if buffer.is_cuda else None)
    on_host = buffer.cpu() if buffer.is_cuda else buffer

    def done(failure: Optional[BaseException]) -> None:
        if failure is None and on_host is not buffer:
            buffer.copy_(on_host)
        finished(failure)

    if buffer.dtype != torch.float32:
        state.comm._impl.iallreduce(on_host, None, "avg", "auto", None, done)
        return future
    # The bucket's buffer holds the parameters' gradients one after another, in order.
    views, offset = [], 0
    for parameter in bucket.parameters():
        views.append(on_host[offset:offset + parameter.numel()])
        offset += parameter.numel()
    state.comm._impl.ipowersgd(state.state_for(bucket), views, done)
    return future
