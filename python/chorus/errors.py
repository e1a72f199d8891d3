"""The exceptions chorus raises: one class per category of chorus::error.

Every instance carries ``category``, ``rank``, ``peer`` (-1 when they do not
apply), ``operation`` and ``detail``; ``str()`` is the whole message, e.g.
``chorus peer_failure: rank 0, peer 2, in allreduce: receive failed: ...``.
"""

from __future__ import annotations


class Error(RuntimeError):
    """A chorus operation failed; the subclass says how."""

    category: str = "unknown"
    rank: int = -1
    peer: int = -1
    operation: str = ""
    detail: str = ""


class TimeoutError(Error):  # noqa: A001 - chorus.TimeoutError, as the C++ category
    """A wait ran past the communicator's timeout."""


class PeerFailure(Error):
    """A peer died or its connection broke."""


class InvalidArgument(Error, ValueError):
    """The call was given something unusable; nothing was written."""


class Mismatch(Error):
    """Ranks disagree (sizes, counts, types, protocol)."""


class TransportError(Error):
    """The transport itself failed (UCX, sockets)."""


class Unavailable(Error):
    """This machine lacks what the call needs (a GPU, a driver)."""


__all__ = ["Error", "TimeoutError", "PeerFailure", "InvalidArgument", "Mismatch", "TransportError", "Unavailable"]
