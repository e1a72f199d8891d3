"""DDP communication hooks that average gradients through chorus's codecs.

    from chorus.torch import hooks
    state = hooks.State(codec="int8")                  # collective: every rank, after init_process_group
    ddp.register_comm_hook(state, hooks.compressed_allreduce)
    # or: ddp.register_comm_hook(hooks.State("onebit"), hooks.onebit)

Each bucket is averaged by chorus's compressed allreduce; with error
feedback (the default) the part a codec lost is kept per bucket and added
to the same bucket's next gradient. The DDP process group may be the
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
from . import _future_with_callback, communicator_for

__all__ = ["State", "compressed_allreduce", "fp16", "bf16", "int8", "onebit"]


class State:
    """What a hook keeps between steps: the codec, the chorus communicator,
    and one error-feedback residual per bucket."""

    def __init__(self, codec: str = "int8", *, error_feedback: bool = True, block: Optional[int] = None,
                 process_group: Optional[Any] = None) -> None:
        self.codec = _chorus.Codec(codec, block)
        self.error_feedback = error_feedback
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
    future, done = _future_with_callback(buffer)
    wire = state.wire_for(bucket) if buffer.dtype == torch.float32 else None
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
