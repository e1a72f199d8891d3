"""One-sided tensor windows (docs/windows.md) over NumPy arrays and torch CPU tensors.

    win = chorus.Window(comm, model.parameters(), sources=[left, right])   # collective
    win.put()                      # this rank's tensors into each target's slot
    win.update()                   # tensors = (own + each source's) / (sources + 1)
    win.quiesce(); win.free()      # collective

A window over a list of tensors holds them flattened: `put()`, `accumulate()`
and `publish()` without values send the tensors as they are now, and
`update()` writes the combination back into them. Float32 only.

With `blocking=False`, put, accumulate, get and update return a
:class:`chorus.Request`: a put or accumulate completes once sent (the
tensors may change at once); a get or update runs on the communicator's
background thread, and a non-blocking update writes the tensors when its
request is found complete (test() or wait()). The window's next call waits
for a get or update in flight.
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

import numpy as np

from . import _chorus
from .communicator import Communicator, CodecLike, Request
from .errors import InvalidArgument

Weights = Optional[Union[Mapping[int, float], Sequence[Tuple[int, float]]]]


def _views(tensors: Any) -> List[np.ndarray]:
    """NumPy views of the tensors (torch CPU tensors share their memory)."""
    if isinstance(tensors, np.ndarray) or hasattr(tensors, "detach"):
        tensors = [tensors]
    views = []
    for tensor in tensors:
        where = tensor.__dlpack_device__()[0] if hasattr(tensor, "__dlpack_device__") else 1
        if where not in (1, 3):  # DLPack's kDLCPU, kDLCUDAHost
            raise InvalidArgument(f"a window holds host memory, and this tensor is in device memory (DLPack device "
                                  f"type {where}): windows take CPU tensors")
        array = tensor.detach().numpy() if hasattr(tensor, "detach") else np.asarray(tensor)
        if array.dtype != np.float32 or not array.flags["C_CONTIGUOUS"]:
            raise InvalidArgument("a window holds float32 C-contiguous arrays (CPU tensors)")
        views.append(array)
    return views


class _UpdateRequest(Request):
    """A non-blocking update: the combination reaches the tensors once the request is found complete."""

    __slots__ = ("_flat", "_scatter")

    def __init__(self, pending: Any, flat: np.ndarray, scatter: Any) -> None:
        super().__init__(pending)
        self._flat = flat
        self._scatter = scatter

    def _deliver(self) -> None:
        if self._scatter is not None:
            self._scatter(self._flat)
            self._scatter = None

    def test(self) -> bool:
        done = super().test()
        if done:
            self._deliver()
        return done

    def wait(self) -> None:
        super().wait()
        self._deliver()


def _request(pending: Any) -> Optional[Request]:
    return None if pending is None else Request(pending)


class Window:
    """A tensor window over `tensors` (one array, or a model's parameters): one slot for each
    source on every rank; `sources` (default: every other rank) write into this rank's slots."""

    def __init__(self, comm: Communicator, tensors: Any, *, sources: Optional[Iterable[int]] = None,
                 codec: CodecLike = None, error_feedback: bool = True, ordered: bool = False,
                 drop_dead_peers: bool = False) -> None:
        self._views = _views(tensors)
        self._impl = _chorus.Window(comm._impl, self._flat(), None if sources is None else list(sources), codec,
                                    error_feedback, ordered, drop_dead_peers)

    def _flat(self, values: Any = None) -> np.ndarray:
        """The tensors (or `values`) as one float32 vector: a view for one array, else a copy."""
        views = self._views if values is None else _views(values)
        if len(views) == 1:
            return views[0].reshape(-1)
        return np.concatenate([v.reshape(-1) for v in views]) if views else np.zeros(0, np.float32)

    def _scatter(self, flat: np.ndarray) -> None:
        offset = 0
        for view in self._views:
            view.reshape(-1)[:] = flat[offset:offset + view.size]
            offset += view.size

    @property
    def size(self) -> int:
        return self._impl.size

    @property
    def sources(self) -> List[int]:
        return self._impl.sources

    @property
    def targets(self) -> List[int]:
        return self._impl.targets

    @property
    def p(self) -> float:
        """The weight carried with puts and accumulates (push-sum); 1 at creation."""
        return self._impl.p

    @p.setter
    def p(self, value: float) -> None:
        self._impl.p = value

    def put(self, values: Any = None, weights: Weights = None, *, blocking: bool = True) -> Optional[Request]:
        """weight * values into each target's slot, replacing it ({rank: w}; None: every target, 1)."""
        return _request(self._impl.put(self._flat(values), weights, blocking))

    def accumulate(self, values: Any = None, weights: Weights = None, *,
                   blocking: bool = True) -> Optional[Request]:
        """Adds weight * values to each target's slot."""
        return _request(self._impl.accumulate(self._flat(values), weights, blocking))

    def publish(self, values: Any = None) -> None:
        """Replaces this rank's published tensor (what the others' get() reads)."""
        self._impl.publish(self._flat(values))

    def get(self, weights: Weights = None, *, blocking: bool = True) -> Optional[Request]:
        """Reads each source's published tensor (times its weight) into its slot."""
        return _request(self._impl.get(weights, blocking))

    def update(self, self_weight: Optional[float] = None, weights: Weights = None, *, reset: bool = False,
               blocking: bool = True) -> Optional[Request]:
        """tensors = self_weight * tensors + sum of weight * slot value (uniform when self_weight is None)."""
        flat = np.array(self._flat(), copy=True)
        pending = self._impl.update(flat, self_weight, weights, reset, blocking)
        if pending is not None:
            return _UpdateRequest(pending, flat, self._scatter)
        self._scatter(flat)
        return None

    def collect(self, *, reset: bool = False) -> Dict[int, Tuple[np.ndarray, float]]:
        """{source: (a copy of its slot's value, p)} after reading what landed."""
        return self._impl.collect(reset)

    def version(self, source: int) -> int:
        return self._impl.version(source)

    def wait_versions(self, count: int = 1, sources: Optional[Iterable[int]] = None) -> None:
        self._impl.wait_versions(count, None if sources is None else list(sources))

    def in_quiesce(self, target: int) -> bool:
        """Whether the target has entered quiesce() while this rank has not yet returned from its own
        (it only reads until every rank is in: a push-sum writer keeps the weight it would send there)."""
        return self._impl.in_quiesce(target)

    def ready(self, target: int) -> bool:
        """Whether an accumulate to the target would be written at once: nothing of this rank's waits here
        for it, the link has carried the last entry, and the target has room (read without waiting: False
        until its counter comes back). A push-sum writer keeps the share of a target that is not ready."""
        return self._impl.ready(target)

    def flush(self) -> None:
        self._impl.flush()

    def quiesce(self) -> None:
        """Collective: every put and accumulate made before any rank's quiesce() has landed and been read."""
        self._impl.quiesce()

    @property
    def dropped(self) -> List[int]:
        return self._impl.dropped

    def free(self) -> None:
        """Collective: unregisters the window's memory."""
        self._impl.free()
