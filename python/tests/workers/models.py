"""What the scheme workers share: each rank's model (arrays of sizes
SHAPES: one empty, one of an odd size) and its update at each step, both
from seeds, so that every rank knows every rank's and can compute the
closed forms."""

from __future__ import annotations

import numpy as np

SHAPES = (33, 0, 7)


def start(r: int) -> list:
    """Rank r's starting model."""
    rng = np.random.default_rng([r, 11])
    return [rng.uniform(-1, 1, n).astype(np.float32) for n in SHAPES]


def step_of(r: int, t: int) -> list:
    """Rank r's update at step t."""
    rng = np.random.default_rng([r, t, 12])
    return [rng.uniform(-0.1, 0.1, n).astype(np.float32) for n in SHAPES]
