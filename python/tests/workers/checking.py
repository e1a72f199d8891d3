"""What the collective workers share: every rank's input made from a seed
(so each rank can compute the whole reference), the NumPy reference, and a
check that says what, where and how far off, counting the checks made."""

from __future__ import annotations

import numpy as np

from references import reduction

TOLERANCE = {np.float16: 2e-3, np.float32: 2e-6, np.float64: 1e-12}
_made = [0]


def checks() -> int:
    """How many checks passed so far."""
    return _made[0]


def counted() -> None:
    """Counts a check the worker made itself."""
    _made[0] += 1


def data(r: int, dtype, count: int, salt: int = 0) -> np.ndarray:
    """Rank r's input: small integers, bools or floats in [-1, 1), the same on every rank that asks."""
    rng = np.random.default_rng([r, count, salt, np.dtype(dtype).num])
    if dtype == np.bool_:
        return rng.integers(0, 2, count).astype(np.bool_)
    if np.issubdtype(dtype, np.integer):
        low = -5 if np.issubdtype(dtype, np.signedinteger) else 0
        return rng.integers(low, 6, count).astype(dtype)
    return rng.uniform(-1, 1, count).astype(dtype)


def check(what: str, got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape}, expected {want.shape}")
    if got.dtype.kind == "f":
        scale = TOLERANCE[got.dtype.type] * (1 + np.abs(want.astype(np.float64)))
        wrong = np.abs(got.astype(np.float64) - want.astype(np.float64)) > scale
    else:
        wrong = got != want
    if wrong.any():
        at = int(np.argmax(wrong))
        raise AssertionError(f"{what}: {int(wrong.sum())} of {got.size} wrong, first at {at}: "
                             f"{got.flat[at]!r}, expected {want.flat[at]!r}")
    counted()


def reference(op: str, inputs: list, dtype, ranks: int) -> np.ndarray:
    """`op` over every rank's input, serially in wide types, as `dtype`."""
    kind = np.dtype(dtype)
    return reduction(op, inputs, ranks, bits=kind.itemsize * 8, signed=kind.kind == "i").astype(dtype)
