"""One rank of the device-array tests (run under chorus-run): every
collective, point-to-point and non-blocking call on CUDA arrays of
chorus._testing's fake device, whose memory the host cannot touch (any host
read or write through a device pointer kills the process). Each result is
downloaded and checked against a NumPy reference of every rank's input.

argv[1]: "staged" (the fake stands in for Debian's UCX, which moves host
memory only), "direct" (it stands in for a UCX that moves CUDA memory,
with the fake's kernels, under CHORUS_CUDA_PATH=direct) or "nccl" (the
calls on chorus.nccl.connect's communicator, over chorus's NCCL host
adapter on the fake device)."""

from __future__ import annotations

import sys

import numpy as np

import chorus
import chorus._testing
from checking import check, checks, data, reference

path = sys.argv[1]
fake = chorus._testing.fake_device()
fake.network_reaches_device = path == "direct"
world = chorus.init()
comm = chorus.nccl.connect(world) if path == "nccl" else world
rank, size = comm.rank, comm.size
SMALL_INT = np.int32 if path == "nccl" else np.int16  # NCCL has no 16-bit integers
up, down = fake.upload, fake.download


def zeros(count: int, dtype) -> object:
    return up(np.zeros(count, dtype))


def test_reductions() -> None:
    for dtype in (np.int32, np.uint8, np.float16, np.float32, np.float64, np.bool_):
        for count in (0, 1, 7, 1001):
            inputs = [data(r, dtype, count) for r in range(size)]
            ops = ("sum", "max") if dtype == np.bool_ else ("sum", "min", "avg")
            for op in ops:
                want = reference(op, inputs, dtype, size)
                name = f"{np.dtype(dtype).name} x{count} {op}"
                mine = up(inputs[rank])
                comm.allreduce(mine, op)
                check(f"allreduce {name} in place", down(mine), want)
                given, out = up(inputs[rank]), zeros(count, dtype)
                comm.allreduce(given, op, out=out)
                check(f"allreduce {name} out of place", down(out), want)
                check(f"allreduce {name} leaves its input", down(given), inputs[rank])
    inputs = [data(r, np.float32, 4099, 1) for r in range(size)]
    for algo in ("ring", "recursive_doubling", "rabenseifner", "tree") if path != "nccl" else ():
        mine = up(inputs[rank])
        comm.allreduce(mine, algo=algo)
        check(f"allreduce algo={algo}", down(mine), reference("sum", inputs, np.float32, size))
    if path == "nccl":
        mine = up(inputs[rank])
        comm.allreduce(mine)
        assert comm.last_algorithm == "nccl", comm.last_algorithm
        check("allreduce through NCCL", down(mine), reference("sum", inputs, np.float32, size))
        host = inputs[rank].copy()
        comm.allreduce(host)
        assert comm.last_algorithm != "nccl", "host memory went to NCCL"
        check("allreduce of host memory on an NCCL communicator", host, reference("sum", inputs, np.float32, size))
        bits = [data(r, np.int32, 33, 2) for r in range(size)]
        mine = up(bits[rank])
        comm.allreduce(mine, "bxor")  # NCCL has none: over its chorus communicator, staged
        check("bxor on an NCCL communicator", down(mine), reference("bxor", bits, np.int32, size))
    host_in, device_out = inputs[rank].copy(), zeros(4099, np.float32)
    if path != "nccl":
        comm.allreduce(host_in, out=device_out)
        check("allreduce host input, device output", down(device_out), reference("sum", inputs, np.float32, size))
    else:
        try:
            comm.allreduce(host_in, out=device_out)
            raise AssertionError("NCCL took a host input and a device output")
        except chorus.InvalidArgument as refused:
            assert "device memory and some are not" in str(refused), refused
    for block in (0, 1, 333):
        whole = [data(r, np.int64, block * size, 3) for r in range(size)]
        out = zeros(block, np.int64)
        comm.reduce_scatter(up(whole[rank]), "sum", out=out)
        check(f"reduce_scatter block {block}", down(out),
              reference("sum", whole, np.int64, size)[rank * block:(rank + 1) * block])
        mine = up(whole[rank])
        comm.reduce(mine, root=size - 1, op="max")
        want = reference("max", whole, np.int64, size) if rank == size - 1 else whole[rank]
        check(f"reduce block {block}", down(mine), want)


def test_moving() -> None:
    for dtype in (np.float32, SMALL_INT, np.bool_):
        for block in (0, 1, 5, 4097):
            name = f"{np.dtype(dtype).name} block {block}"
            inputs = [data(r, dtype, block, 2) for r in range(size)]
            root = size - 1
            mine = up(inputs[rank])
            comm.broadcast(mine, root)
            check(f"broadcast {name}", down(mine), inputs[root])

            out = up(np.zeros((size, block), dtype))
            comm.allgather(up(inputs[rank]), out=out)
            check(f"allgather {name}", down(out), np.stack(inputs))

            whole = [data(r, dtype, block * size, 3) for r in range(size)]
            out = zeros(block * size, dtype)
            comm.alltoall(up(whole[rank]), out=out)
            check(f"alltoall {name}", down(out),
                  np.concatenate([whole[r][rank * block:(rank + 1) * block] for r in range(size)]))

            gathered = up(np.zeros((size, block), dtype)) if rank == 0 else None
            comm.gather(up(inputs[rank]), 0, out=gathered)
            if rank == 0:
                check(f"gather {name}", down(gathered), np.stack(inputs))
            out = zeros(block, dtype)
            comm.scatter(up(whole[root]) if rank == root else None, root, out=out)
            check(f"scatter {name}", down(out), whole[root][rank * block:(rank + 1) * block])


def test_point_to_point_and_nonblocking() -> None:
    if size > 1 and path == "nccl":  # blocking only, matched in order: pairs (0, 1), (2, 3), ...; the lower sends first
        partner = rank ^ 1
        for count in (0, 1, 4097) if partner < size else ():
            got, mine = zeros(count, np.float32), up(data(rank, np.float32, count, 4))
            if rank < partner:
                comm.send(mine, partner)
                comm.recv(got, partner)
            else:
                comm.recv(got, partner)
                comm.send(mine, partner)
            check(f"send/recv x{count} through NCCL", down(got), data(partner, np.float32, count, 4))
        # Around the ring, every rank sending before it receives: queued, then posted as one group by a wait.
        after, before = (rank + 1) % size, (rank - 1) % size
        for count in (0, 1, 4097):
            got = zeros(count, np.float32)
            sent = comm.isend(up(data(rank, np.float32, count, 5)), after)
            received = comm.irecv(got, before)
            received.wait()
            sent.wait()
            check(f"isend/irecv x{count} around the ring through NCCL", down(got), data(before, np.float32, count, 5))
        try:
            comm.isend(up(np.zeros(1, np.float32)), after, tag=3)
            raise AssertionError("a tag on an NCCL communicator raised nothing")
        except chorus.InvalidArgument as refused:
            assert "no tags" in str(refused), refused
    elif size > 1:
        after, before = (rank + 1) % size, (rank - 1) % size
        for count in (0, 1, 4097, 300001):  # the largest goes by rendezvous
            got = zeros(count, np.float32)
            sent = comm.isend(up(data(rank, np.float32, count, 4)), after, tag=7)
            comm.irecv(got, before, tag=7).wait()
            sent.wait()
            check(f"isend/irecv ring x{count}", down(got), data(before, np.float32, count, 4))
        if rank == 0:
            comm.send(up(np.arange(5, dtype=np.int64)), 1)
        elif rank == 1:
            check("send/recv", down(comm.recv(zeros(5, np.int64), 0)), np.arange(5, dtype=np.int64))
        if rank == 0:
            senders = []
            for _ in range(size - 1):
                got = zeros(3, np.int32)
                senders.append(comm.recv_any(got, tag=11))
                check("recv_any holds its sender's array", down(got), np.full(3, senders[-1], np.int32))
            assert sorted(senders) == list(range(1, size)), senders
        else:
            comm.send(up(np.full(3, rank, np.int32)), 0, tag=11)
    inputs = [data(r, np.float32, 2049, 5) for r in range(size)]
    arrays = [up(inputs[rank]) for _ in range(3)]
    requests = [comm.iallreduce(a, "sum") for a in arrays]
    gathered = up(np.zeros((size, 2049), np.float32))
    comm.iallgather(up(inputs[rank]), out=gathered).wait()
    for request in requests:
        request.wait()
    for a in arrays:
        check("iallreduce", down(a), reference("sum", inputs, np.float32, size))
    check("iallgather", down(gathered), np.stack(inputs))
    mine = up(inputs[rank])
    comm.ibroadcast(mine, 0).wait()
    check("ibroadcast", down(mine), inputs[0])
    whole = [data(r, np.float32, 3 * size, 6) for r in range(size)]
    out = zeros(3, np.float32)
    comm.ireduce_scatter(up(whole[rank]), out=out).wait()
    check("ireduce_scatter", down(out), reference("sum", whole, np.float32, size)[rank * 3:(rank + 1) * 3])
    out = zeros(3 * size, np.float32)
    comm.ialltoall(up(whole[rank]), out=out).wait()
    check("ialltoall", down(out), np.concatenate([whole[r][rank * 3:(rank + 1) * 3] for r in range(size)]))


def test_streams() -> None:
    """A call reads its arrays after the work already on its stream: a 'kernel' that writes the input late,
    then the allreduce on the same stream, blocking and not; the result downloaded after that stream."""
    inputs = [data(r, np.float32, 1001, 10) for r in range(size)]
    for blocking in (True, False):
        stream = fake.stream()
        mine = zeros(1001, np.float32)
        fake.write_later(mine, inputs[rank], stream, 0.2)
        if blocking:
            comm.allreduce(mine, stream=stream)
        else:
            comm.iallreduce(mine, stream=stream).wait()
        check(f"allreduce after the stream's work ({'blocking' if blocking else 'non-blocking'})",
              down(mine, stream), reference("sum", inputs, np.float32, size))


def test_codecs() -> None:
    # Error feedback's first call has no residual yet: the codec's own bound holds.
    for codec, bounded_by in (("fp16", "fp16"), ("int8", "int8"), (chorus.ErrorFeedback("int8"), "int8")):
        for op in ("sum", "avg"):
            inputs = [data(r, np.float32, 1001, 7) for r in range(size)]
            exact = np.stack(inputs).astype(np.float64).sum(axis=0) / (size if op == "avg" else 1)
            bound = chorus.allreduce_error_bound(bounded_by, np.stack(inputs)) / (size if op == "avg" else 1)
            if not isinstance(codec, str):
                codec = chorus.ErrorFeedback("int8")
            mine = up(inputs[rank])
            comm.allreduce(mine, op, codec=codec)
            error = np.abs(down(mine) - exact)
            assert (error <= bound).all(), f"{codec} {op}: error {error.max()} over the bound at {error.argmax()}"
    values = data(0, np.float32, 513, 9)
    wire = chorus.Codec("fp16")
    encoded, roundtrip = np.zeros(wire.encoded_bytes(513), np.uint8), np.zeros(513, np.float32)
    wire.encode(values, encoded)
    wire.decode(encoded, roundtrip)
    mine = up(values if rank == 0 else np.zeros(513, np.float32))
    comm.broadcast(mine, 0, codec="fp16")
    check("broadcast codec=fp16 equals the codec's round trip", down(mine), roundtrip)


def test_refusals() -> None:
    """What reads arrays on the host refuses device arrays, and an array on another device is refused, both
    before anything is written."""
    values = up(np.ones(8, np.float32))
    try:
        chorus.Codec("int8").encode(values, np.zeros(64, np.uint8))
        raise AssertionError("Codec.encode took a device array")
    except chorus.InvalidArgument as refused:
        assert "CUDA memory" in str(refused), refused
    elsewhere = fake.upload(np.ones(8, np.float32), device_id=1)
    try:
        comm.allreduce(elsewhere)
        raise AssertionError("an array on cuda:1 was taken")
    except chorus.InvalidArgument as refused:
        assert "cuda:1" in str(refused) and "cuda:0" in str(refused), refused
    check("a refused array is unchanged", down(elsewhere), np.ones(8, np.float32))
    assert chorus.cuda.device() == 0


copies_before = fake.copies
test_reductions()
test_moving()
test_point_to_point_and_nonblocking()
test_streams()
test_codecs()
test_refusals()
if path == "nccl":
    # Not synchronous: a call returns once enqueued behind the stream's work, synchronize() waits for it.
    enqueued = chorus.nccl.connect(world, synchronous=False)
    inputs = [data(r, np.float32, 1001, 11) for r in range(size)]
    stream = fake.stream()
    mine = zeros(1001, np.float32)
    fake.write_later(mine, inputs[rank], stream, 0.2)
    enqueued.allreduce(mine, stream=stream)
    enqueued.synchronize(stream)
    check("allreduce on a non-synchronous NCCL communicator, synchronized", down(mine),
          reference("sum", inputs, np.float32, size))
    enqueued.abort("the test is done with it")
    try:
        enqueued.allreduce(mine)
        raise AssertionError("an aborted NCCL communicator took a call")
    except chorus.Error as refused:
        assert "the test is done with it" in str(refused) or "abort" in str(refused), refused
    enqueued.close()
    half = comm.split(rank % 2)
    members = [r for r in range(size) if r % 2 == rank % 2]
    mine = up(np.array([rank], np.int64))
    half.allreduce(mine)
    check("split NCCL communicator's allreduce", down(mine), np.array([sum(members)], np.int64))
    half.close()
elif path == "direct":
    assert fake.kernel_launches > 0 or size == 1, "the direct path launched no reductions"
else:
    assert fake.copies > copies_before, "nothing was staged"
comm.barrier()
print(f"rank {rank}: passed {checks()} device-array checks ({path})", flush=True)
comm.close()
world.close()
sys.exit(0)
