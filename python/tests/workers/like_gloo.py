"""One rank of the Gloo-parity tests: the same torch.distributed program on
the backend named on the command line ("gloo" or "chorus"), printing what
each call did as one line per call, so the test compares the two backends
line by line.

    like_gloo.py BACKEND working        subgroups made and destroyed, all_gather_coalesced
                                        (complex, empty, integer), recv from any source
                                        (recorded by both profilers), sparse all_reduce,
                                        a monitored_barrier everyone reaches
    like_gloo.py BACKEND absent_one     rank 1 skips a monitored_barrier
    like_gloo.py BACKEND absent_all     ranks 1 and 2 skip one waited with wait_all_ranks
    like_gloo.py BACKEND absent_root    rank 0 skips one
    like_gloo.py BACKEND barrier_alone  rank 0 alone calls barrier() on a group with a 2 s timeout
    like_gloo.py BACKEND zero_timeout   rank 0 alone calls monitored_barrier with a timeout of 0
    like_gloo.py BACKEND attributes     every attribute of the group and of its CPU backend, and the
                                        queries that take no arguments: what kind of answer each gives

A call's line is its result, or the kind of error it raised: whether it is a
RuntimeError, says "Timed out", which ranks it names, and which of the
patterns torch's own tests match its message with it matches. Lines starting
"chorus:" are checks only the chorus backend makes (torch's exception
types, the call named in the error); the test requires them all "ok".
"""

from __future__ import annotations

import json
import re
import sys
import time
from datetime import timedelta
from typing import Any, Callable

import torch
import torch.distributed as dist

backend, case = sys.argv[1], sys.argv[2]
if backend == "chorus":
    import chorus
    import chorus.torch  # noqa: F401 - registers the backend

SHORT = timedelta(seconds=2)
dist.init_process_group(backend, timeout=timedelta(seconds=60))
rank, size = dist.get_rank(), dist.get_world_size()


def say(what: str, outcome: Any) -> None:
    print(f"rank {rank}: {what} = {json.dumps(outcome, sort_keys=True)}", flush=True)


# What torch's distributed_test.py matches errors with, and user code with
# it: its barrier-timeout tests' pattern, and its monitored_barrier tests'.
BARRIER_TIMEOUT = r" (Timed out|closed|timeout) "
TORCH_PATTERNS = {
    "failed to pass": r"Ranks? \d+(, \d+)* failed to pass monitoredBarrier",
    "reached": r"Rank \d+ successfully reached monitoredBarrier, but received errors while waiting for send/recv "
               r"from rank 0",
    "rank 0 timed out": r"Rank 0 timed out in monitoredBarrier",
}


def kind_of(failure: BaseException) -> dict:
    text = str(failure)
    named = sorted({int(n) for n in re.findall(r"[Rr]anks? (\d+(?:, \d+)*)", text) for n in n.split(", ")})
    return {"runtime_error": isinstance(failure, RuntimeError), "value_error": isinstance(failure, ValueError),
            "timed_out": "timed out" in text.lower(), "names": named,
            "barrier_timeout_words": re.search(BARRIER_TIMEOUT, text) is not None,
            "torch_words": sorted(name for name, pattern in TORCH_PATTERNS.items() if re.search(pattern, text))}


def outcome(what: str, call: Callable[[], Any], chorus_checks: Callable[[BaseException], str] = None) -> None:
    """Runs call(); says its result or its error's kind, and for chorus the
    backend's own checks of the error."""
    try:
        say(what, {"result": call()})
    except Exception as failure:  # noqa: BLE001 - the kind of error is the outcome
        say(what, {"error": kind_of(failure)})
        if backend == "chorus" and chorus_checks is not None:
            print(f"chorus: {what}: {chorus_checks(failure)}", flush=True)


def torch_typed(operation: str) -> Callable[[BaseException], str]:
    """chorus's errors are torch's types, keep chorus's class, and name the call."""
    def check(failure: BaseException) -> str:
        problems = []
        if not isinstance(failure, dist.DistBackendError):
            problems.append(f"{type(failure).__name__} is not a DistBackendError")
        if not isinstance(failure, chorus.Error):
            problems.append("not a chorus.Error")
        if operation not in str(failure):
            problems.append(f"does not name {operation}: {failure}")
        return "ok" if not problems else "; ".join(problems)
    return check


def values(tensors: list) -> list:
    return [[t.tolist() if not t.is_complex() else [[z.real, z.imag] for z in t.tolist()] for t in row]
            for row in tensors]


def working() -> None:
    # Subgroups: one of ranks 0 and 1 (rank 2 is not in it), one of all ranks.
    pair = dist.new_group([0, 1])
    everyone = dist.new_group()
    tensor = torch.full((3,), float(rank + 1))
    if rank in (0, 1):
        outcome("all_reduce on the pair", lambda: (dist.all_reduce(tensor, group=pair), tensor.tolist())[1])
    outcome("destroy the pair", lambda: dist.destroy_process_group(pair))
    outcome("all_reduce on the group of all", lambda: (dist.all_reduce(tensor, group=everyone), tensor.tolist())[1])
    outcome("destroy the group of all", lambda: dist.destroy_process_group(everyone))

    # all_gather_coalesced: real, complex and empty tensors; integer ones; none at all.
    for what, inputs in (("floats", [torch.arange(3, dtype=torch.float32) + rank,
                                     torch.tensor([1 + 1j * rank, 2j], dtype=torch.complex64), torch.zeros(0)]),
                         ("integers", [torch.tensor([[rank, -rank]], dtype=torch.int64),
                                       torch.full((5,), rank, dtype=torch.int64)]),
                         ("empty", [torch.zeros(0, dtype=torch.int32)])):
        outputs = [[torch.empty_like(t) for t in inputs] for _ in range(size)]
        outcome(f"all_gather_coalesced of {what}",
                lambda: (dist.all_gather_coalesced(outputs, inputs), values(outputs))[1])

    # Receive from any source, blocking and not, under both profilers.
    received = torch.zeros(2)
    if rank == 0:
        def from_anyone() -> list:
            got = []
            with torch.profiler.profile() as profiled:
                for _ in range(size - 1):
                    source = dist.recv(received)
                    got.append([source, received.tolist()])
            with torch.autograd.profiler.profile() as legacy:
                work = dist.irecv(received)
                work.wait()
                got.append([work._source_rank(), received.tolist()])
            names = [event.name for event in profiled.events()] + [event.name for event in legacy.function_events]
            recorded = sum("recvanysource" in name.lower().replace("_", "") for name in names)
            return {"received": sorted(got), "profiled": recorded >= size}
        outcome("recv from any source", from_anyone)
    else:
        dist.send(torch.full((2,), float(rank)), 0)
        if rank == size - 1:
            dist.send(torch.full((2,), -1.0), 0)

    # Sparse all_reduce: overlapping indices, summed and coalesced.
    indices = torch.tensor([[0, 1, 1 + rank, 3], [2, 0, rank % 3, 2]])
    sparse = torch.sparse_coo_tensor(indices, torch.tensor([3.0, 4.0 + rank, 5.0, 0.5 * rank]), (4, 3))
    outcome("sparse all_reduce", lambda: (dist.all_reduce(sparse), {
        "coalesced": sparse.is_coalesced(), "dense": sparse.to_dense().tolist(),
        "indices": sparse._indices().tolist()})[1])

    outcome("monitored_barrier everyone reaches", lambda: dist.monitored_barrier(timeout=timedelta(seconds=30)))
    outcome("destroy the default group", lambda: dist.destroy_process_group())


def absent(missing: set, wait_all: bool) -> None:
    if rank in missing:
        time.sleep(5)  # past everyone's timeout: it never comes
        return
    outcome("monitored_barrier", lambda: dist.monitored_barrier(timeout=SHORT, wait_all_ranks=wait_all),
            torch_typed("monitored_barrier"))


def barrier_alone() -> None:
    short = dist.new_group(timeout=SHORT)
    if rank == 0:
        outcome("barrier alone", lambda: dist.barrier(group=short), torch_typed("barrier"))
    else:
        time.sleep(5)


def zero_timeout() -> None:
    everyone = dist.new_group()
    if rank == 0:
        outcome("monitored_barrier with no time", lambda: everyone.monitored_barrier(timedelta(seconds=0)),
                torch_typed("monitored_barrier"))
    else:
        time.sleep(3)


# Queries that take no arguments (or only a device), asked of the group or
# of its CPU backend; abort and shutdown, which end the group, are not.
QUERIES = {"rank": (), "size": (), "name": (), "_get_backend_name": (), "_get_sequence_number_for_group": (),
           "_has_hooks": (), "_id": (), "get_group_store": (), "_enable_collectives_timing": ()}
BACKEND_QUERIES = {"supports_tensor_alloc": (torch.device("cpu"),), "get_error": (),
                   "eager_connect_single_device": (torch.device("cpu"),), "_get_sequence_number_for_group": ()}


def kind_of_value(value: Any) -> str:
    """A value's kind, as both backends must agree on it (not the class:
    Gloo's options are its own subclass of torch's)."""
    for kind in (bool, int, float, str, list, tuple, dict, dist.Store, torch.device):
        if isinstance(value, kind):
            return kind.__name__
    return "None" if value is None else "object"


def answer(owner: Any, name: str) -> dict:
    """What kind of answer `owner.name` gives: a value's kind, a callable, or an error's type."""
    try:
        value = getattr(owner, name)
    except Exception as failure:  # noqa: BLE001 - the kind of error is the answer
        return {"raises": type(failure).__name__}
    return {"callable": True} if callable(value) else {"value": kind_of_value(value)}


def called(owner: Any, name: str, arguments: tuple) -> dict:
    try:
        return {"returns": kind_of_value(getattr(owner, name)(*arguments))}
    except Exception as failure:  # noqa: BLE001
        return {"raises": type(failure).__name__}


def attributes() -> None:
    group = dist.group.WORLD
    backend_of_cpu = group._get_backend(torch.device("cpu"))
    for name in sorted(n for n in dir(dist.ProcessGroup) if not n.startswith("__") and not n[0].isupper()):
        say(f"group.{name}", answer(group, name))
    for name in sorted(n for n in dir(torch._C._distributed_c10d.Backend)
                       if not n.startswith("__") and not n[0].isupper()):
        say(f"backend.{name}", answer(backend_of_cpu, name))
    for name, arguments in QUERIES.items():
        say(f"group.{name}()", called(group, name, arguments))
    for name, arguments in BACKEND_QUERIES.items():
        say(f"backend.{name}()", called(backend_of_cpu, name, arguments))
    say("hasattr(group, 'supports_window')", hasattr(group, "supports_window"))
    say("dist._supports_window()", dist.distributed_c10d._supports_window())


if case == "working":
    working()
elif case == "absent_one":
    absent({1}, wait_all=False)
elif case == "absent_all":
    absent({1, 2}, wait_all=True)
elif case == "absent_root":
    absent({0}, wait_all=False)
elif case == "barrier_alone":
    barrier_alone()
elif case == "zero_timeout":
    zero_timeout()
elif case == "attributes":
    attributes()
print(f"rank {rank}: done", flush=True)
