"""How a chorus communicator is made for a torch group: the address of
chorus's own store travels through torch's store."""
from __future__ import annotations

import os
import secrets
import socket
from datetime import timedelta
from typing import Any

import torch.distributed as dist

from ..communicator import Communicator, connect


def _own_address() -> str:
    """The address other hosts reach this one at: CHORUS_HOST, else the one
    this host uses towards MASTER_ADDR, else its name's."""
    if os.environ.get("CHORUS_HOST"):
        return os.environ["CHORUS_HOST"]
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((master, int(os.environ.get("MASTER_PORT", "29500"))))
            return probe.getsockname()[0]
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _connect_through(store: Any, rank: int, size: int, timeout: timedelta) -> Communicator:
    """A chorus communicator whose store address travels through torch's store."""
    if rank == 0:
        token = secrets.token_hex(16)
        store.set("chorus/token", token)
    else:
        token = store.get("chorus/token").decode()
    own = _own_address()
    # Code first: a timeout the program gave torch is the communicator's; torch's
    # default (passed when the program gave none) yields to CHORUS_TIMEOUT.
    given = timeout != dist.distributed_c10d.default_pg_timeout
    seconds = timeout.total_seconds() if given or not os.environ.get("CHORUS_TIMEOUT") else None
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    return connect(rank, size, host="0.0.0.0", token=token, local_size=local_size, timeout=seconds,
                   publish=lambda _host, port: store.set("chorus/store", f"{own}:{port}"),
                   look_up=lambda: store.get("chorus/store").decode())
