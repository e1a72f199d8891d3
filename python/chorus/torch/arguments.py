"""What the backend takes from torch's calls: the reduce op (and
PREMUL_SUM's products), and a tensor as chorus takes it."""
from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist

from ..errors import InvalidArgument


_REDUCE_OPS = {
    dist.ReduceOp.SUM: "sum",
    dist.ReduceOp.PRODUCT: "prod",
    dist.ReduceOp.MIN: "min",
    dist.ReduceOp.MAX: "max",
    dist.ReduceOp.AVG: "avg",
    dist.ReduceOp.BAND: "band",
    dist.ReduceOp.BOR: "bor",
    dist.ReduceOp.BXOR: "bxor",
}


def _op_name(op: Any, call: str) -> str:
    for known, name in _REDUCE_OPS.items():
        if op == known:
            return name
    if op == dist.ReduceOp.PREMUL_SUM:
        return "premul_sum"
    raise NotImplementedError(f"chorus backend: {call} with reduce op {op} is not supported "
                              "(SUM, PRODUCT, MIN, MAX, AVG, PREMUL_SUM, BAND, BOR, BXOR are)")


def _reduction(opts: Any, call: str) -> "tuple[str, Any]":
    """The chorus op of a call's opts, and PREMUL_SUM's factor (a float,
    or a one-element tensor as FSDP2 passes it; None for the other ops)."""
    op = opts.reduceOp if opts is not None else dist.ReduceOp.SUM
    name = _op_name(op, call)
    return name, (op.factor if name == "premul_sum" else None)


def _premultiplied(tensor: torch.Tensor, factor: Any, in_place: bool) -> torch.Tensor:
    """PREMUL_SUM's products, which the call then sums: each rank's tensor
    times the factor, rounded to its dtype (as chorus's op::premul_sum and
    NCCL's ncclRedOpCreatePreMulSum define it), on the tensor's device.
    `in_place`: into the tensor itself (an in-place allreduce overwrites
    it anyway); else a new tensor, the caller's left as it was."""
    if tensor.is_complex() or not tensor.is_floating_point():
        raise InvalidArgument(f"chorus backend: PREMUL_SUM reduces floating-point tensors, not {tensor.dtype}")
    if isinstance(factor, torch.Tensor):
        if factor.numel() != 1:
            raise InvalidArgument(f"chorus backend: PREMUL_SUM's factor is a scalar or a one-element tensor, "
                                  f"not {factor.numel()} elements")
        factor = factor.reshape(()).to(tensor.device)
    return tensor.mul_(factor) if in_place else tensor * factor


def _flat(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor as chorus takes it: complex numbers as pairs of reals."""
    return torch.view_as_real(tensor) if tensor.is_complex() else tensor


_ON_CPU = {torch.device("cpu")}
