"""The flight recorder from Python: what a communicator has done lately.

Every communicator keeps its last calls (``CHORUS_RECORD``, default 2048
entries per communicator; docs/observability.md), and each rank writes them
as JSON on an error raised to the caller, on SIGUSR1 and at exit
(``CHORUS_RECORD_DIR``). ``chorus-trace report DIR`` reads a job's dumps.

    import chorus, chorus.record
    comm = chorus.init()
    comm.allreduce(x)
    chorus.record.entries(comm)[-1]["name"]     # 'allreduce'
    path = chorus.record.dump(comm)             # this rank's dump, now
    chorus.record.read(path)["communicators"]   # its communicators and entries

A torch process group of backend "chorus" records its calls under torch's
names (``allreduce``, ``allgather_into_tensor``, ``reduce_scatter_tensor``,
``allreduce_coalesced``, ...); pass the group to these functions as it is.
"""

from __future__ import annotations

import json
import os
from typing import Any, Dict, List, Optional, Union

__all__ = ["dump", "entries", "journal", "read"]


def _impl(comm: Any) -> Any:
    """The binding's communicator behind a chorus Communicator or a torch
    process group of backend "chorus"."""
    for attribute in ("communicator", "_comm"):  # a torch process group
        if hasattr(comm, attribute) and hasattr(getattr(comm, attribute), "_impl"):
            comm = getattr(comm, attribute)
            break
    impl = getattr(comm, "_impl", None)
    if impl is None:
        raise TypeError(f"chorus.record: {comm!r} is not a chorus communicator or a chorus process group")
    return impl


def journal(comm: Any) -> Optional[Dict[str, Any]]:
    """This rank's whole flight record (every communicator of its job), as a
    dump holds it; None when recording is off (CHORUS_RECORD=0)."""
    text = _impl(comm).record_json()
    return None if text is None else json.loads(text)


def entries(comm: Any) -> List[Dict[str, Any]]:
    """The entries `comm` still holds, oldest first: each a dict with seq,
    kind, name, type, count, bytes, op, root, peer, algorithm, path, state,
    and posted_ns / started_ns / ended_ns (Unix nanoseconds, 0: not yet).
    Empty when recording is off."""
    impl = _impl(comm)
    record = journal(comm)
    if record is None:
        return []
    ident = impl.record_id
    for ring in record["communicators"]:
        if ring["id"] == ident:
            return ring["entries"]
    return []


def dump(comm: Any) -> Optional[str]:
    """Writes this rank's flight record now (to CHORUS_RECORD_DIR, else to a
    directory of the job under the temporary directory) and returns its
    path; None when recording is off."""
    return _impl(comm).record_dump()


def read(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]:
    """A dump (rank-<rank>.json) as a dict: job, rank, size, host, pid,
    chorus_version, reason, error, and its communicators with their members
    and entries."""
    with open(path, encoding="utf-8") as file:
        record = json.load(file)
    if not isinstance(record, dict) or record.get("format") != "chorus-record":
        raise ValueError(f"{os.fspath(path)} is not a chorus flight record")
    return record
