"""One rank of the plain-API collective tests (run under chorus-run).

Every rank makes every rank's input from a seed, so each result is checked
against a NumPy reduction of all inputs computed here; any mismatch raises
with what, where and how far off."""

from __future__ import annotations

import sys

import numpy as np

import chorus
from checking import check, checks, counted, data
from checking import reference as reference_of

comm = chorus.init()
rank, size = comm.rank, comm.size

INTEGERS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64]
FLOATS = [np.float16, np.float32, np.float64]


def reference(op: str, inputs: list, dtype) -> np.ndarray:
    return reference_of(op, inputs, dtype, size)


def ops_for(dtype) -> list:
    if dtype == np.bool_:
        return ["sum", "prod", "min", "max", "band", "bor", "bxor"]
    base = ["sum", "prod", "min", "max", "avg"]
    return base + (["band", "bor", "bxor"] if np.issubdtype(dtype, np.integer) else [])


def test_allreduce() -> None:
    for dtype in INTEGERS + FLOATS + [np.bool_]:
        for count in (0, 1, 7, 1001):
            inputs = [data(r, dtype, count) for r in range(size)]
            for op in ops_for(dtype):
                want = reference(op, inputs, dtype)
                mine = inputs[rank].copy()
                comm.allreduce(mine, op)
                check(f"allreduce {op} {np.dtype(dtype).name} x{count} in place", mine, want)
                out = np.full(count, 3, dtype)
                kept = inputs[rank].copy()
                comm.allreduce(kept, op, out=out)
                check(f"allreduce {op} {np.dtype(dtype).name} x{count} out of place", out, want)
                check(f"allreduce {op} out of place leaves the input", kept, inputs[rank])
    inputs = [data(r, np.float32, 1001, 1) for r in range(size)]
    for algo in ("ring", "recursive_doubling", "rabenseifner", "tree"):
        mine = inputs[rank].copy()
        comm.allreduce(mine, algo=algo)
        check(f"allreduce algo={algo}", mine, reference("sum", inputs, np.float32))
        assert comm.last_algorithm == algo or size == 1, (algo, comm.last_algorithm)


def test_rooted_and_moving() -> None:
    for dtype in (np.int32, np.float64, np.uint8, np.bool_):
        for block in (0, 1, 5, 333):
            name = f"{np.dtype(dtype).name} block {block}"
            inputs = [data(r, dtype, block, 2) for r in range(size)]
            root = size - 1
            mine = inputs[rank].copy()
            check(f"broadcast {name}", comm.broadcast(mine, root), inputs[root])

            mine = inputs[rank].copy()
            comm.reduce(mine, root=1 % size, op="max")
            check(f"reduce {name}", mine, reference("max", inputs, dtype) if rank == 1 % size else inputs[rank])

            check(f"allgather {name}", comm.allgather(inputs[rank]), np.stack(inputs))

            whole = [data(r, dtype, block * size, 3) for r in range(size)]
            op = "max" if dtype == np.bool_ else "sum"
            summed = reference(op, whole, dtype)
            check(f"reduce_scatter {name}", comm.reduce_scatter(whole[rank], op),
                  summed[rank * block:(rank + 1) * block])

            mine = comm.alltoall(whole[rank])
            check(f"alltoall {name}", mine,
                  np.concatenate([whole[r][rank * block:(rank + 1) * block] for r in range(size)]))

            gathered = comm.gather(inputs[rank], 0)
            if rank == 0:
                check(f"gather {name}", gathered, np.stack(inputs))
            else:
                assert gathered is None
            out = np.zeros(block, dtype)
            comm.scatter(whole[root] if rank == root else None, root, out=out)
            check(f"scatter {name}", out, whole[root][rank * block:(rank + 1) * block])


def test_point_to_point_and_nonblocking() -> None:
    if size > 1:
        after, before = (rank + 1) % size, (rank - 1) % size
        for count in (0, 1, 4097, 300001):  # the largest goes by rendezvous
            mine = data(rank, np.float32, count, 4)
            got = np.zeros(count, np.float32)
            sent = comm.isend(mine, after, tag=7)
            received = comm.irecv(got, before, tag=7)
            received.wait()
            sent.wait()
            check(f"isend/irecv ring x{count}", got, data(before, np.float32, count, 4))
        mine = np.arange(5, dtype=np.int64) + rank
        if rank == 0:
            comm.send(mine, 1)
        elif rank == 1:
            check("send/recv", comm.recv(np.zeros(5, np.int64), 0), np.arange(5, dtype=np.int64))
        try:  # a receive of the wrong size is a clear error (rank 1 expects 5, rank 0 sends 6)
            if rank == 0:
                comm.send(np.zeros(6, np.int64), 1, tag=9)
            elif rank == 1:
                comm.recv(np.zeros(5, np.int64), 0, tag=9)
                raise AssertionError("a 6-element message into 5 raised nothing")
        except chorus.Mismatch:
            pass
    inputs = [data(r, np.float32, 2049, 5) for r in range(size)]
    arrays = [inputs[rank].copy() for _ in range(3)]
    called = []
    requests = [comm.iallreduce(a, "sum", callback=called.append) for a in arrays]
    gathered = comm.iallgather(inputs[rank])
    for request in requests:
        request.wait()
    for a in arrays:
        check("iallreduce", a, reference("sum", inputs, np.float32))
    check("iallgather", gathered.wait(), np.stack(inputs))
    assert called == [None, None, None], called
    bcast = inputs[rank].copy()
    check("ibroadcast", comm.ibroadcast(bcast, 0).wait(), inputs[0])
    whole = [data(r, np.float32, 3 * size, 6) for r in range(size)]
    check("ireduce_scatter", comm.ireduce_scatter(whole[rank]).wait(),
          reference("sum", whole, np.float32)[rank * 3:(rank + 1) * 3])
    check("ialltoall", comm.ialltoall(whole[rank]).wait(),
          np.concatenate([whole[r][rank * 3:(rank + 1) * 3] for r in range(size)]))


def test_codecs() -> None:
    for codec in ("fp16", "bf16", "int8", "onebit", chorus.Codec("int8", block=64)):
        for op in ("sum", "avg"):
            inputs = [data(r, np.float32, 1001, 7) for r in range(size)]
            exact = np.stack(inputs).astype(np.float64).sum(axis=0)
            bound = chorus.allreduce_error_bound(codec, np.stack(inputs)).astype(np.float64)
            if op == "avg":
                exact, bound = exact / size, bound / size
            mine = inputs[rank].copy()
            comm.allreduce(mine, op, codec=codec)
            error = np.abs(mine - exact)
            assert (error <= bound).all(), f"{codec} {op}: error {error.max()} over the bound at {error.argmax()}"
            counted()
    feedback = chorus.ErrorFeedback("int8")
    inputs = [data(r, np.float32, 777, 8) for r in range(size)]
    mine = inputs[rank].copy()
    comm.allreduce(mine, "avg", codec=feedback)
    bound = chorus.allreduce_error_bound("int8", np.stack(inputs)) / size
    assert (np.abs(mine - np.stack(inputs).mean(axis=0)) <= bound).all()
    assert len(feedback.residual()) == 777 and np.any(np.array(feedback.residual()) != 0)
    counted()
    for codec in ("fp16", "int8"):
        values = data(0, np.float32, 513, 9)
        mine = values.copy() if rank == 0 else np.zeros(513, np.float32)
        comm.broadcast(mine, 0, codec=codec)
        roundtrip = np.zeros(513, np.float32)
        wire = chorus.Codec(codec)
        encoded = np.zeros(wire.encoded_bytes(513), np.uint8)
        wire.encode(values, encoded)
        wire.decode(encoded, roundtrip)
        check(f"broadcast codec={codec} equals the codec's round trip", mine, roundtrip)
        check(f"allgather codec={codec}", comm.allgather(values, codec=codec), np.stack([roundtrip] * size))


def test_split() -> None:
    half = comm.split(rank % 2)
    members = [r for r in range(size) if r % 2 == rank % 2]
    assert half.size == len(members) and half.rank == members.index(rank)
    mine = np.array([rank], np.int64)
    check("split allreduce", half.allreduce(mine), np.array([sum(members)], np.int64))
    half.close()


def test_powersgd() -> None:
    """A rank-1 matrix on every rank (u v^T times a rank's own scalar) and a vector, at rank 1: the mean exactly,
    blocking and not; a bad array is a clear error."""
    u, v = np.sin(np.arange(9) * 0.7), np.cos(np.arange(6) * 1.3)
    matrix = lambda r: (np.outer(u, v) * (1 + r)).astype(np.float32).ravel()
    vector = lambda r: data(r, np.float32, 5, salt=9)
    state = chorus.PowerSGD([(9, 6), (1, 5)], rank=1, seed=2)
    assert state.compressed(0) and not state.compressed(1) and state.floats_per_step == 9 + 6 + 5
    for blocking in (True, False):
        tensors = [matrix(rank), vector(rank)]
        if blocking:
            comm.powersgd(state, tensors)
        else:
            comm.ipowersgd(state, tensors).wait()
        check("powersgd matrix", tensors[0], np.mean([matrix(r) for r in range(size)], axis=0).astype(np.float32))
        check("powersgd vector", tensors[1], np.mean([vector(r) for r in range(size)], axis=0).astype(np.float32))
    try:
        comm.powersgd(state, [np.zeros(54, np.float64), vector(rank)])
        raise AssertionError("a float64 array was taken")
    except chorus.InvalidArgument as refused:
        assert "float32" in str(refused)
        counted()


test_allreduce()
test_powersgd()
test_rooted_and_moving()
test_point_to_point_and_nonblocking()
test_codecs()
test_split()
comm.barrier()
print(f"rank {rank}: passed {checks()} checks", flush=True)
comm.close()
sys.exit(0)
