"""chorus's errors as the backend raises them: instances of torch's
error classes too, worded as torch words its own."""
from __future__ import annotations

import re
from typing import Dict, Optional

import torch.distributed as dist

from .. import errors
from ..errors import Error

# The torch exception each chorus category is also raised as.
_TORCH_BASES = {
    errors.TimeoutError: dist.DistBackendError,
    errors.PeerFailure: dist.DistBackendError,
    errors.Mismatch: dist.DistBackendError,
    errors.Unavailable: dist.DistBackendError,
    errors.TransportError: dist.DistNetworkError,
}
_flavoured: Dict[type, type] = {}


def _torch_words(failure: Error) -> str:
    """A chorus error's message in torch's words, chorus's after them: a
    timeout "[Rank 0]: Timed out in barrier: chorus timeout: ...", a lost
    peer "[Rank 0]: Connection closed by a peer: chorus peer_failure: ..."
    (what torch's tests and user code match Gloo's errors with)."""
    rank = getattr(failure, "rank", -1)
    who = f"[Rank {rank}]: " if rank is not None and rank >= 0 else ""
    if isinstance(failure, errors.TimeoutError):
        return f"{who}Timed out in {failure.operation or 'a chorus call'}: {failure}"
    if isinstance(failure, errors.PeerFailure):
        return f"{who}Connection closed by a peer: {failure}"
    return str(failure)


def torch_error(failure: BaseException, message: Optional[str] = None) -> BaseException:
    """`failure` as the backend raises it: a chorus error is made an instance
    of both its chorus class and torch's (chorus.TimeoutError and
    torch.distributed.DistBackendError, say), with chorus's message and
    attributes; its message torch's words with chorus's after them
    (_torch_words), or `message` where the caller words it
    (monitored_barrier). Bad arguments
    stay chorus.InvalidArgument (a ValueError); anything else is returned
    as it is."""
    if not isinstance(failure, Error) or isinstance(failure, dist.DistError):
        return failure
    base = next((torch_base for chorus_class, torch_base in _TORCH_BASES.items()
                 if isinstance(failure, chorus_class)), None)
    if base is None:
        return failure
    kind = type(failure)
    if kind not in _flavoured:
        _flavoured[kind] = type(kind.__name__, (kind, base), {"__module__": "chorus.torch"})
    made = _flavoured[kind](_torch_words(failure) if message is None else message)
    for name in ("category", "rank", "peer", "operation", "detail"):
        setattr(made, name, getattr(failure, name, getattr(Error, name)))
    made.__cause__ = failure
    return made


# chorus's monitored_barrier errors (collective/barrier/monitored_barrier.hpp), as
# rank 0 raises them: the ranks that did not arrive in time, or the first
# that died.
_MISSING = re.compile(r"ranks? ([\d, ]+) failed (?:to pass|before passing) monitored_barrier")


def _monitored_barrier_wording(rank: int, seconds: float, failure: Error) -> str:
    """Torch's words for a monitored_barrier failure, as Gloo's
    (ProcessGroupGloo::monitoredBarrier), then the error behind it as Gloo
    gives its own ("Original exception"), chorus's in torch's words."""
    behind = f"\n Original exception: \n{_torch_words(failure)}"
    missing = _MISSING.search(str(failure)) if rank == 0 else None
    if missing is not None:
        ranks = missing.group(1)
        who = f"Ranks {ranks}" if "," in ranks else f"Rank {ranks}"
        if seconds == 0:  # no time to wait at all
            behind = f"\n Original exception: \nRank 0 timed out in monitoredBarrier after 0 ms: {_torch_words(failure)}"
        return f"[Rank 0]: {who} failed to pass monitoredBarrier in {seconds * 1000:.0f} ms{behind}"
    if rank != 0:
        return (f"Rank {rank} successfully reached monitoredBarrier, but received errors while waiting for "
                f"send/recv from rank 0. Please check rank 0 logs for faulty rank.{behind}")
    return f"[Rank 0]: monitoredBarrier failed{behind}"
