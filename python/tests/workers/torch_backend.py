"""One rank of the torch-backend tests, under torchrun: every collective
through torch.distributed with the "chorus" backend, every dtype torch and
chorus share, results against NumPy references of all ranks' inputs (each
rank makes them all from seeds); async work; bad
input left unchanged; allreduce-SGD through chorus.averaging against one
process training on the whole batch."""

from __future__ import annotations

import warnings

import numpy as np
import torch
import torch.distributed as dist

import chorus
import chorus.torch  # registers "chorus"
from chorus import averaging
from references import reduction

dist.init_process_group("chorus")
rank, size = dist.get_rank(), dist.get_world_size()
checks = 0

DTYPES = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.uint16, torch.uint32, torch.uint64,
          torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool]
TOLERANCE = {torch.float16: 2e-3, torch.bfloat16: 2e-2, torch.float32: 2e-6, torch.float64: 1e-12}


def data(r: int, dtype: torch.dtype, count: int, salt: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(r * 100003 + count * 131 + salt * 7 + DTYPES.index(dtype)
                                      if dtype in DTYPES else r + salt)
    if dtype == torch.bool:
        return torch.randint(0, 2, (count,), generator=g).bool()
    if dtype.is_complex:
        return torch.complex(torch.rand(count, generator=g), torch.rand(count, generator=g)).to(dtype)
    if dtype.is_floating_point:
        return (torch.rand(count, generator=g) * 2 - 1).to(dtype)
    low = -5 if dtype in (torch.int8, torch.int16, torch.int32, torch.int64) else 0
    return torch.randint(low, 6, (count,), generator=g).to(dtype)


def numpy_of(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.float().numpy()
    if t.dtype in (torch.uint16, torch.uint32, torch.uint64):
        return t.to(torch.int64).numpy()
    return t.numpy()


def check(what: str, got: torch.Tensor, want: np.ndarray, dtype: torch.dtype) -> None:
    global checks
    checks += 1
    got_np = numpy_of(got)
    want = np.asarray(want)
    assert got_np.shape == want.shape, f"rank {rank}: {what}: shape {got_np.shape}, expected {want.shape}"
    if dtype in TOLERANCE or dtype.is_complex:
        tolerance = TOLERANCE.get(dtype, 2e-6)
        wrong = np.abs(got_np.astype(np.complex128) - want.astype(np.complex128)) > tolerance * (1 + np.abs(want))
    else:
        wrong = got_np != want
    assert not wrong.any(), (f"rank {rank}: {what}: {int(wrong.sum())} wrong, first "
                             f"{got_np.flat[int(np.argmax(wrong))]} vs {want.flat[int(np.argmax(wrong))]}")


OPS = {"sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX,
       "avg": dist.ReduceOp.AVG, "band": dist.ReduceOp.BAND, "bor": dist.ReduceOp.BOR, "bxor": dist.ReduceOp.BXOR}


def reference(op: str, inputs: list, dtype: torch.dtype) -> np.ndarray:
    arrays = [numpy_of(t) for t in inputs]
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        return reduction(op, arrays, size)
    return reduction(op, arrays, size, bits=torch.iinfo(dtype).bits, signed=torch.iinfo(dtype).min < 0)


def ops_for(dtype: torch.dtype) -> list:
    if dtype == torch.bool:
        return ["sum", "prod", "min", "max", "band", "bor", "bxor"]
    return ["sum", "prod", "min", "max", "avg"] + ([] if dtype.is_floating_point else ["band", "bor", "bxor"])


def test_all_reduce() -> None:
    for dtype in DTYPES:
        for count in (0, 1, 7, 1001):
            inputs = [data(r, dtype, count) for r in range(size)]
            for op in ops_for(dtype):
                mine = inputs[rank].clone()
                dist.all_reduce(mine, op=OPS[op])
                check(f"all_reduce {op} {dtype} x{count}", mine, reference(op, inputs, dtype), dtype)
    inputs = [data(r, torch.complex64, 33) for r in range(size)]
    mine = inputs[rank].clone()
    dist.all_reduce(mine)
    check("all_reduce complex64", mine, reference("sum", inputs, torch.complex64), torch.complex64)
    works = []
    tensors = [data(rank, torch.float32, 4099, k) for k in range(3)]
    expected = [reference("sum", [data(r, torch.float32, 4099, k) for r in range(size)], torch.float32)
                for k in range(3)]
    for t in tensors:
        works.append(dist.all_reduce(t, async_op=True))
    for work, t, want in zip(works, tensors, expected):
        work.wait()
        check("async all_reduce", t, want, torch.float32)
    together = [data(rank, torch.float64, n, 3) for n in (0, 1, 7, 300)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch marks all_reduce_coalesced deprecated; scripts still call it
        dist.all_reduce_coalesced(together, op=dist.ReduceOp.MAX)
    for n, t in zip((0, 1, 7, 300), together):
        check(f"all_reduce_coalesced x{n}", t, reference("max", [data(r, torch.float64, n, 3) for r in range(size)],
                                                         torch.float64), torch.float64)
    # An asynchronous call, then a blocking one on the same tensor: they run
    # in torch's order (the blocking one waits for the first), so x n x n.
    twice = torch.ones(100003)
    first = dist.all_reduce(twice, async_op=True)
    dist.all_reduce(twice)
    first.wait()
    check("async then blocking all_reduce, in order", twice, np.full(100003, float(size * size)), torch.float32)
    future = dist.all_reduce(torch.ones(3), async_op=True).get_future()
    check("the future's value", future.wait()[0], np.full(3, float(size)), torch.float32)


def test_movement() -> None:
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.bool):
        for block in (0, 1, 5, 333):
            name = f"{dtype} block {block}"
            inputs = [data(r, dtype, block, 1) for r in range(size)]
            root = size - 1
            mine = inputs[rank].clone()
            dist.broadcast(mine, src=root)
            check(f"broadcast {name}", mine, numpy_of(inputs[root]), dtype)

            outs = [torch.empty(block, dtype=dtype) for _ in range(size)]
            dist.all_gather(outs, inputs[rank])
            for r in range(size):
                check(f"all_gather {name} from {r}", outs[r], numpy_of(inputs[r]), dtype)
            whole = torch.empty(block * size, dtype=dtype)
            dist.all_gather_into_tensor(whole, inputs[rank])
            check(f"all_gather_into_tensor {name}", whole, np.concatenate([numpy_of(t) for t in inputs]), dtype)

            big = [data(r, dtype, block * size, 2) for r in range(size)]
            op = "max" if dtype == torch.bool else "sum"
            summed = reference(op, big, dtype)
            out = torch.empty(block, dtype=dtype)
            dist.reduce_scatter_tensor(out, big[rank], op=OPS[op])
            check(f"reduce_scatter_tensor {name}", out, summed[rank * block:(rank + 1) * block], dtype)
            out = torch.empty(block, dtype=dtype)
            dist.reduce_scatter(out, list(big[rank].split(block)) if block else [torch.empty(0, dtype=dtype)] * size,
                                op=OPS[op])
            check(f"reduce_scatter {name}", out, summed[rank * block:(rank + 1) * block], dtype)

            out = torch.empty(block * size, dtype=dtype)
            dist.all_to_all_single(out, big[rank])
            check(f"all_to_all_single {name}", out,
                  np.concatenate([numpy_of(big[r])[rank * block:(rank + 1) * block] for r in range(size)]), dtype)

            mine = inputs[rank].clone()
            dist.reduce(mine, dst=0, op=OPS["max"])
            check(f"reduce {name}", mine, reference("max", inputs, dtype) if rank == 0 else numpy_of(inputs[rank]),
                  dtype)
            gathered = [torch.empty(block, dtype=dtype) for _ in range(size)] if rank == 0 else None
            dist.gather(inputs[rank], gathered, dst=0)
            if rank == 0:
                for r in range(size):
                    check(f"gather {name} from {r}", gathered[r], numpy_of(inputs[r]), dtype)
            out = torch.empty(block, dtype=dtype)
            dist.scatter(out, list(big[root].split(block)) if rank == root and block else
                         ([torch.empty(0, dtype=dtype)] * size if rank == root else None), src=root)
            check(f"scatter {name}", out, numpy_of(big[root])[rank * block:(rank + 1) * block], dtype)

    # uneven all_to_all_single: rank r sends r + j + 1 rows to rank j
    sends = [rank + j + 1 for j in range(size)]
    receives = [j + rank + 1 for j in range(size)]
    source = torch.arange(sum(sends) * 2, dtype=torch.float32).reshape(-1, 2) + 1000 * rank
    out = torch.empty(sum(receives), 2)
    dist.all_to_all_single(out, source, output_split_sizes=receives, input_split_sizes=sends)
    pieces = []
    for j in range(size):
        theirs = torch.arange(sum(j + k + 1 for k in range(size)) * 2, dtype=torch.float32).reshape(-1, 2) + 1000 * j
        offset = sum(j + k + 1 for k in range(rank))
        pieces.append(theirs[offset:offset + j + rank + 1])
    check("all_to_all_single with split sizes", out, torch.cat(pieces).numpy(), torch.float32)
    # The asynchronous forms, all in flight at once, then waited in reverse.
    block = 1001
    inputs = [data(r, torch.float32, block * size, 5) for r in range(size)]
    broadcasted, gathered = inputs[rank].clone(), torch.empty(block * size * size)
    scattered, exchanged = torch.empty(block), torch.empty(block * size)
    works = [dist.broadcast(broadcasted, src=size - 1, async_op=True),
             dist.all_gather_into_tensor(gathered, inputs[rank], async_op=True),
             dist.reduce_scatter_tensor(scattered, inputs[rank], async_op=True),
             dist.all_to_all_single(exchanged, inputs[rank], async_op=True),
             dist.barrier(async_op=True)]
    for work in reversed(works):
        work.wait()
    check("async broadcast", broadcasted, numpy_of(inputs[size - 1]), torch.float32)
    check("async all_gather_into_tensor", gathered, np.concatenate([numpy_of(t) for t in inputs]), torch.float32)
    check("async reduce_scatter_tensor", scattered,
          reference("sum", inputs, torch.float32)[rank * block:(rank + 1) * block], torch.float32)
    check("async all_to_all_single", exchanged,
          np.concatenate([numpy_of(inputs[r])[rank * block:(rank + 1) * block] for r in range(size)]), torch.float32)

    outs = [torch.empty(3) for _ in range(size)]
    dist.all_to_all(outs, [torch.full((3,), float(rank * 10 + j)) for j in range(size)])
    for j in range(size):
        check(f"all_to_all from {j}", outs[j], np.full(3, float(j * 10 + rank)), torch.float32)
    dist.barrier()

    if size > 1:
        after, before = (rank + 1) % size, (rank - 1) % size
        got = torch.empty(100003)
        receiving = dist.irecv(got, src=before)
        sending = dist.isend(torch.full((100003,), float(rank)), dst=after)
        receiving.wait()
        sending.wait()
        check("isend/irecv ring", got, np.full(100003, float(before)), torch.float32)
        got = [torch.empty(5, dtype=torch.int64), torch.empty(0)]
        works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, got[0], before), dist.P2POp(dist.irecv, got[1], before),
                                        dist.P2POp(dist.isend, torch.full((5,), rank), after),
                                        dist.P2POp(dist.isend, torch.empty(0), after)])
        for work in works:
            work.wait()
        check("batch_isend_irecv ring", got[0], np.full(5, before), torch.int64)
        if rank == 0:
            dist.send(torch.arange(4.), dst=1, tag=3)
        elif rank == 1:
            t = torch.empty(4)
            dist.recv(t, src=0, tag=3)
            check("send/recv", t, np.arange(4.), torch.float32)


def test_in_place_chunks() -> None:
    """NCCL's in-place forms, as FSDP2 calls them: the input of
    all_gather_into_tensor is this rank's chunk of the output, the output of
    reduce_scatter_tensor this rank's chunk of the input; blocking, async
    and coalesced."""
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for block in (0, 1, 7, 1001):
            name = f"{dtype} block {block}"
            inputs = [data(r, dtype, block, 8) for r in range(size)]
            whole = torch.full((block * size,), 3, dtype=dtype)
            whole[rank * block:(rank + 1) * block] = inputs[rank]
            dist.all_gather_into_tensor(whole, whole[rank * block:(rank + 1) * block])
            check(f"all_gather_into_tensor in place {name}", whole, np.concatenate([numpy_of(t) for t in inputs]),
                  dtype)
            big = [data(r, dtype, block * size, 9) for r in range(size)]
            mine = big[rank].clone()
            work = dist.reduce_scatter_tensor(mine[rank * block:(rank + 1) * block], mine, async_op=True)
            work.wait()
            check(f"reduce_scatter_tensor in place {name}", mine[rank * block:(rank + 1) * block],
                  reference("sum", big, dtype)[rank * block:(rank + 1) * block], dtype)
    outputs = [torch.zeros(5 * size), torch.zeros(2 * size)]
    for k, out in enumerate(outputs):
        width = out.numel() // size
        out[rank * width:(rank + 1) * width] = float(rank * 10 + k)
    with dist._coalescing_manager(async_ops=True) as gathered:
        for out in outputs:
            width = out.numel() // size
            dist.all_gather_into_tensor(out, out[rank * width:(rank + 1) * width], async_op=True)
    gathered.wait()
    for k, out in enumerate(outputs):
        check(f"coalesced all_gather_into_tensor in place, tensor {k}", out,
              np.repeat([float(r * 10 + k) for r in range(size)], out.numel() // size), torch.float32)


def test_premul_sum() -> None:
    """ReduceOp.PREMUL_SUM: each rank's tensor times the factor (a float, or
    a one-element tensor as FSDP2 passes it), then summed; the caller's
    input of an out-of-place call stays as it was."""
    for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        for factor in (0.25, torch.tensor([1.0 / 3.0]), torch.tensor(0.5, dtype=torch.float64)):
            name = f"{dtype} factor {factor}"
            premul = dist._make_nccl_premul_sum(factor)
            f = float(factor)
            inputs = [data(r, dtype, 1001, 10) for r in range(size)]
            products = [(t.double() * f).to(dtype) for t in inputs]  # each rank's product, rounded to its dtype
            mine = inputs[rank].clone()
            dist.all_reduce(mine, op=premul)
            check(f"all_reduce PREMUL_SUM {name}", mine, reference("sum", products, dtype), dtype)
            mine = inputs[rank].clone()
            dist.reduce(mine, dst=size - 1, op=premul)
            check(f"reduce PREMUL_SUM {name}", mine,
                  reference("sum", products, dtype) if rank == size - 1 else numpy_of(inputs[rank]), dtype)
            big = [data(r, dtype, 7 * size, 11) for r in range(size)]
            given = big[rank].clone()
            out = torch.empty(7, dtype=dtype)
            dist.reduce_scatter_tensor(out, given, op=premul)
            check(f"reduce_scatter_tensor PREMUL_SUM {name}", out,
                  reference("sum", [(t.double() * f).to(dtype) for t in big], dtype)[rank * 7:(rank + 1) * 7], dtype)
            check(f"reduce_scatter_tensor PREMUL_SUM leaves its input {name}", given, numpy_of(big[rank]), dtype)
    try:
        dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist._make_nccl_premul_sum(2.0))
    except (chorus.InvalidArgument, ValueError) as refused:
        assert "floating-point" in str(refused), refused
    else:
        raise AssertionError("PREMUL_SUM of integers was taken")


def test_refusals_and_bad_input() -> None:
    global checks
    strided = torch.arange(12.).reshape(3, 4).t()
    before = strided.clone()
    try:
        dist.all_reduce(strided)
    except (chorus.InvalidArgument, RuntimeError, ValueError) as refused:
        assert "contiguous" in str(refused), refused
        assert torch.equal(strided, before)
        checks += 1
    else:
        raise AssertionError("a strided tensor was reduced")
    out, kept = torch.full((size * 3 + 1,), 7.0), torch.ones(3)
    try:
        dist.all_gather_into_tensor(out, kept)
    except (chorus.InvalidArgument, RuntimeError, ValueError) as refused:
        assert "elements" in str(refused), refused
        assert torch.equal(out, torch.full((size * 3 + 1,), 7.0))
        checks += 1
    else:
        raise AssertionError("a wrong-sized output was taken")
    wide = torch.ones(3, dtype=torch.complex128)
    try:
        dist.all_reduce(wide, op=dist.ReduceOp.MAX)
    except (chorus.InvalidArgument, RuntimeError, ValueError):
        assert torch.equal(wide, torch.ones(3, dtype=torch.complex128))
        checks += 1
    else:
        raise AssertionError("max of complex numbers was taken")


def test_averaged_optimizer() -> None:
    """allreduce-SGD over chorus equals one process on the whole batch."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    reference_model = torch.nn.Sequential(torch.nn.Linear(5, 4), torch.nn.Tanh(), torch.nn.Linear(4, 3))
    reference_model.load_state_dict(model.state_dict())
    comm = chorus.torch.communicator_of()
    optimizer = averaging.Averaged(torch.optim.SGD(model.parameters(), lr=0.1),
                                   averaging.AllreduceSGD(comm, model.parameters()))
    whole = torch.optim.SGD(reference_model.parameters(), lr=0.1)
    for step in range(3):
        batches = [torch.Generator().manual_seed(step * 10 + r) for r in range(size)]
        xs = [torch.randn(6, 5, generator=g) for g in batches]
        ys = [torch.randn(6, 3, generator=g) for g in batches]
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(xs[rank]), ys[rank]).backward()
        optimizer.step()
        whole.zero_grad()
        torch.nn.functional.mse_loss(reference_model(torch.cat(xs)), torch.cat(ys)).backward()
        whole.step()
    for mine, theirs in zip(model.parameters(), reference_model.parameters()):
        check("allreduce-SGD = one process on the whole batch", mine.detach(), theirs.detach().numpy(),
              torch.float32)
    optimizer.finish()


test_all_reduce()
test_movement()
test_in_place_chunks()
test_premul_sum()
test_refusals_and_bad_input()
test_averaged_optimizer()
dist.barrier()
print(f"rank {rank}: passed {checks} checks", flush=True)
dist.destroy_process_group()
