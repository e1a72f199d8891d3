"""The chorus communicator behind a torch group, or one opened beside
another backend's group."""
from __future__ import annotations

from typing import Any, Optional

import torch.distributed as dist

from ..communicator import Communicator
from ..errors import InvalidArgument
from .process_group import ProcessGroupChorus
from .rendezvous import _connect_through

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
