"""Where a call's tensors go."""
from __future__ import annotations

from typing import Any, Optional

import torch
import torch.distributed as dist

from ..communicator import _on_stream
from .works import ChorusWork, _GpuWork


class _Route:
    """Where a call's tensors go: CPU tensors to the group's chorus
    communicator; CUDA tensors to its NCCL communicator, enqueued on torch's
    current stream of their device (taken when the route is made)."""

    __slots__ = ("impl", "device", "gpus", "stream")

    def __init__(self, impl: Any, device: Optional[torch.device] = None, gpus: Any = None,
                 stream: Optional[torch.cuda.Stream] = None) -> None:
        self.impl, self.device, self.gpus, self.stream = impl, device, gpus, stream

    @classmethod
    def current(cls, impl: Any, device: Optional[torch.device]) -> "_Route":
        """To `impl`, on torch's current stream of `device` (None: host memory)."""
        return cls(impl, device, None, torch.cuda.current_stream(device) if device is not None else None)

    @property
    def on_gpu(self) -> bool:
        return self.device is not None

    def ordered(self) -> _on_stream:
        """`with route.ordered():` the chorus calls inside are enqueued on the route's stream (CUDA tensors)."""
        return _on_stream(self.stream.cuda_stream if self.stream is not None else None)

    def completed(self, result: Any) -> dist.Work:
        """The Work of a call that has run (CPU tensors) or been enqueued (CUDA tensors)."""
        if self.stream is not None:
            return _GpuWork(result, self.stream, self.gpus)
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(result)
        return ChorusWork(future)

    def empty(self, shape: Any, dtype: torch.dtype) -> torch.Tensor:
        """A scratch tensor where the call's tensors are."""
        return torch.empty(shape, dtype=dtype, device=self.device or "cpu")
