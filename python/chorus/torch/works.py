"""The Works a call returns: ChorusWork on a chorus call's Future (CPU
tensors), _GpuWork on torch's current stream (CUDA tensors), and _call,
the wrapper every call of the backend runs in."""
from __future__ import annotations

import functools
import os
import time
from datetime import timedelta
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.distributed as dist

from .. import errors
from ..errors import Error
from .failures import torch_error


class _call:
    """One call of the backend: recorded as "chorus:<name>" while a torch
    profiler runs, its chorus errors raised as torch's (torch_error). A
    class, not a generator: it wraps every call, and costs a microsecond
    where a contextlib generator costs several."""

    __slots__ = ("name", "recording")

    def __init__(self, name: str) -> None:
        self.name = name
        self.recording: Any = None

    def __enter__(self) -> None:
        if torch._C._autograd._profiler_enabled():
            self.recording = torch.autograd.profiler.record_function(f"chorus:{self.name}")
            self.recording.__enter__()

    def __exit__(self, kind: Any, failure: Optional[BaseException], trace: Any) -> bool:
        if self.recording is not None:
            self.recording.__exit__(kind, failure, trace)
        if isinstance(failure, Error):
            translated = torch_error(failure)
            if translated is not failure:
                raise translated from failure
        return False


def _future_with_callback(result: Any, devices: Optional[List[torch.device]] = None
                          ) -> "tuple[torch.futures.Future, Callable[[Optional[BaseException]], None]]":
    """A torch Future and the completion callback a non-blocking chorus call
    takes: called with None, the future gets `result`; with an exception, that.
    `devices`: the CUDA devices of the result's tensors (a CUDA-aware future,
    whose waiters' streams wait for the streams current when it is set)."""
    future: torch.futures.Future = torch.futures.Future(devices=devices) if devices else torch.futures.Future()

    def done(failure: Optional[BaseException]) -> None:
        if failure is None:
            future.set_result(result)
        else:
            future.set_exception(torch_error(failure))

    return future, done


class ChorusWork(dist.Work):
    """The Work of a chorus call: wait() raises what the call raised (a Work
    made with torch's _create_work_from_future reports success instead), and
    get_future() is the future chorus completes."""

    def __init__(self, future: torch.futures.Future, request: Any = None) -> None:
        super().__init__()
        self._future = future
        self.request = request  # chorus's, for a call started on a chorus thread

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        with _call("wait"):
            if self.request is not None:
                self.request.wait()  # raises the collective's exception
            self._future.wait()
        return True

    def source_rank(self) -> int:
        """For a receive from any source: the sender's rank in the group."""
        if self.request is None or not hasattr(self.request, "source") or self.request.source < 0:
            raise RuntimeError("source_rank: not a completed receive from any source")
        return self.request.source

    _source_rank = source_rank

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


@functools.lru_cache(maxsize=1)
def _blocking_wait() -> bool:
    """TORCH_NCCL_BLOCKING_WAIT=1: wait() blocks the host, as with torch's NCCL backend (read at the first wait,
    as torch reads it once)."""
    return os.environ.get("TORCH_NCCL_BLOCKING_WAIT", "0").lower() in ("1", "true", "yes")


# CUDA events the finished _GpuWorks left, by device index: a CUDA event
# costs several microseconds to create and destroy, a third of a small
# all_reduce's time from Python.
_SPARE_EVENTS: Dict[int, List[torch.cuda.Event]] = {}


class _GpuWork(dist.Work):
    """The Work of a call on CUDA tensors, enqueued on torch's current stream
    of their device (as ProcessGroupNCCL's Work): wait() makes the caller's
    current stream wait for it and returns at once; synchronize() blocks the
    host until the stream has done it, bounded by the NCCL communicator's
    timeout, and wait(timeout) by `timeout`; an NCCL error or the timeout
    aborts the NCCL communicator and raises. A queued send or receive
    (`post`) is started, with everything queued, by the first of these.
    Its torch Future is made when asked for (DDP asks at once): one event
    and nothing else per call otherwise."""

    def __init__(self, result: Any, stream: Any, gpus: Any, post: Optional[Callable[[], Any]] = None) -> None:
        super().__init__()
        self._result, self._stream, self._gpus, self._post = result, stream, gpus, post
        self._future: Optional[torch.futures.Future] = None
        spare = _SPARE_EVENTS.setdefault(stream.device_index, [])
        self._done = spare.pop() if spare else torch.cuda.Event()
        if post is None:
            self._done.record(stream)

    def __del__(self) -> None:
        # Nothing can wait for this Work's event any more (a wait already
        # enqueued keeps the record it saw): the next Work records it anew,
        # rather than creating and destroying a CUDA event per call.
        done, stream = getattr(self, "_done", None), getattr(self, "_stream", None)
        spare = _SPARE_EVENTS.get(stream.device_index) if done is not None and stream is not None else None
        if spare is not None and len(spare) < 64:
            spare.append(done)

    def _started(self) -> None:
        if self._post is not None:
            post, self._post = self._post, None
            with _call("wait"):
                post()
            self._done.record(self._stream)

    def wait(self, timeout: Optional[timedelta] = None) -> bool:
        self._started()
        seconds = timeout.total_seconds() if timeout is not None else 0.0
        if seconds > 0:
            self._wait_on_host(seconds)
        elif _blocking_wait():
            self.synchronize()
        stream = self._stream
        if torch._C._cuda_getCurrentRawStream(stream.device_index) != stream.cuda_stream:
            torch.cuda.current_stream(stream.device).wait_event(self._done)
        return True

    def synchronize(self) -> None:
        self._started()
        with _call("synchronize"):
            self._gpus.synchronize(self._stream)

    def _wait_on_host(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._done.query():
            if time.monotonic() >= deadline:
                reason = f"not done within {seconds:g} s (wait's timeout); the NCCL communicator was aborted"
                self._gpus.abort(reason)
                raise torch_error(errors.TimeoutError(f"chorus timeout: in wait: nccl: {reason}"))
            time.sleep(0.0001)

    def is_completed(self) -> bool:
        self._started()
        return self._done.query()

    def is_success(self) -> bool:
        return self.is_completed()

    def get_future(self) -> torch.futures.Future:
        self._started()
        if self._future is None:
            # A CUDA-aware future whose events are on the call's stream: its
            # waiters' streams wait for the call.
            self._future = torch.futures.Future(devices=[self._stream.device])
            with torch.cuda.stream(self._stream):
                self._future.set_result(self._result)
        return self._future
