"""The serial reference the workers check collectives against: every rank's
array reduced here, one element at a time, in wide types."""

from __future__ import annotations

import numpy as np


def reduction(op: str, arrays: list, ranks: int, bits: int = 64, signed: bool = True) -> np.ndarray:
    """`op` over `arrays` (one per rank, same dtype): floats and complex in
    double precision, integers in int64 and then wrapped to `bits` as an
    integer type of that width wraps, bools as logic (sum and max are or,
    prod and min are and). avg truncates integers toward zero."""
    stacked = np.stack(arrays)
    if stacked.dtype == np.bool_:
        if op in ("sum", "max", "bor"):
            return stacked.any(axis=0)
        if op in ("prod", "min", "band"):
            return stacked.all(axis=0)
        return np.logical_xor.reduce(stacked, axis=0)
    kind = stacked.dtype.kind
    stacked = stacked.astype(np.complex128 if kind == "c" else np.float64 if kind == "f" else np.int64)
    with np.errstate(over="ignore"):
        if op == "sum":
            result = stacked.sum(axis=0)
        elif op == "prod":
            result = stacked.prod(axis=0)
        elif op == "min":
            result = stacked.min(axis=0)
        elif op == "max":
            result = stacked.max(axis=0)
        elif op == "avg":
            result = stacked.sum(axis=0) / ranks if kind in "fc" else np.trunc(stacked.sum(axis=0) / ranks)
        elif op == "band":
            result = np.bitwise_and.reduce(stacked, axis=0)
        elif op == "bor":
            result = np.bitwise_or.reduce(stacked, axis=0)
        else:
            result = np.bitwise_xor.reduce(stacked, axis=0)
    if kind in "fc":
        return result
    result = result.astype(np.int64)
    if bits < 64:
        result = result & ((1 << bits) - 1)
        if signed:
            result = np.where(result >= 1 << (bits - 1), result - (1 << bits), result)
    return result
