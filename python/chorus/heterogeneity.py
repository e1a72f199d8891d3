"""Workers that differ, dialled in and reproducible: a slow rank and jittered steps.

    delays = chorus.heterogeneity.StepDelays(rank, size, slow=["3:4"], jitter="pareto:2:1.5", seed=7)
    with delays.step():
        loss_fn(model(x), y).backward()

The twin of C++'s ``chorus::averaging::step_delays`` (averaging/heterogeneity.hpp),
drawing the same delays for the same seed and rank:

- ``slow="RANK:FACTOR"``: that rank's compute takes FACTOR times as long, by a
  calibrated sleep (each step's compute is timed and followed by FACTOR - 1 times
  its own duration asleep: a sleep slows only the straggler when ranks share
  cores, where extra compute would slow its neighbours too);
- ``jitter``: a delay after every step of every rank, heavy-tailed, at most 10 s:
  ``exponential:MEAN_MS``, ``pareto:SCALE_MS:ALPHA``, ``lognormal:MEDIAN_MS:SIGMA``
  (or ``none``); drawn from splitmix64 seeded by (seed, rank).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass
from typing import Iterable, Iterator, Optional, Union

from .errors import InvalidArgument

_MASK = (1 << 64) - 1
MAX_SECONDS = 10.0


class SplitMix64:
    """splitmix64: the generator C++ draws from, bit for bit."""

    def __init__(self, seed: int) -> None:
        self.state = seed & _MASK

    def next(self) -> int:
        self.state = (self.state + 0x9E3779B97F4A7C15) & _MASK
        z = self.state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
        return z ^ (z >> 31)

    def uniform(self) -> float:
        """Uniform in (0, 1), never 0 or 1."""
        return ((self.next() >> 11) + 0.5) * 2.0 ** -53


def _number(text: str, what: str, spec: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InvalidArgument(f'"{spec}": {what} is not a number') from None
    if not math.isfinite(value):
        raise InvalidArgument(f'"{spec}": {what} is not a number')
    return value


@dataclass(frozen=True)
class SlowRank:
    rank: int
    factor: float

    @staticmethod
    def parse(spec: str) -> "SlowRank":
        """"RANK:FACTOR", e.g. "3:4"."""
        fields = spec.split(":")
        if len(fields) != 2:
            raise InvalidArgument(f'"{spec}": a slow rank is RANK:FACTOR')
        rank, factor = _number(fields[0], "the rank", spec), _number(fields[1], "the factor", spec)
        if rank < 0 or rank != int(rank):
            raise InvalidArgument(f'"{spec}": the rank is not a rank')
        if factor < 1.0:
            raise InvalidArgument(f'"{spec}": the factor is at least 1 (a rank is slowed, not sped up)')
        return SlowRank(int(rank), factor)


@dataclass(frozen=True)
class Jitter:
    kind: str = "none"  # none, exponential, pareto, lognormal
    scale_ms: float = 0.0
    tail: float = 0.0

    @staticmethod
    def parse(spec: str) -> "Jitter":
        fields = spec.split(":")
        forms = {"none": 1, "exponential": 2, "pareto": 3, "lognormal": 3}
        names = {"none": "none", "exponential": "exponential:MEAN_MS", "pareto": "pareto:SCALE_MS:ALPHA",
                 "lognormal": "lognormal:MEDIAN_MS:SIGMA"}
        if fields[0] not in forms:
            raise InvalidArgument(f'"{spec}": jitter is none, exponential:MEAN_MS, pareto:SCALE_MS:ALPHA or '
                                  "lognormal:MEDIAN_MS:SIGMA")
        if len(fields) != forms[fields[0]]:
            raise InvalidArgument(f'"{spec}": jitter is {names[fields[0]]}')
        if fields[0] == "none":
            return Jitter()
        scale = _number(fields[1], "the scale", spec)
        tail = _number(fields[2], "the tail parameter", spec) if len(fields) == 3 else 0.0
        if scale < 0 or (fields[0] == "pareto" and tail <= 0) or (fields[0] == "lognormal" and tail < 0):
            raise InvalidArgument(f'"{spec}": the scale is >= 0, Pareto\'s alpha > 0, log-normal\'s sigma >= 0')
        return Jitter(fields[0], scale, tail)

    def draw(self, random: SplitMix64) -> float:
        """One delay in seconds (the same inverse transforms as C++)."""
        if self.kind == "none":
            return 0.0
        if self.kind == "exponential":
            ms = -self.scale_ms * math.log(random.uniform())
        elif self.kind == "pareto":
            ms = self.scale_ms * random.uniform() ** (-1.0 / self.tail)
        else:
            radius = math.sqrt(-2.0 * math.log(random.uniform()))
            normal = radius * math.cos(2.0 * 3.14159265358979323846 * random.uniform())
            ms = self.scale_ms * math.exp(self.tail * normal)
        return min(ms / 1e3, MAX_SECONDS)


class StepDelays:
    """One rank's delays: ``with delays.step():`` around a step's compute."""

    def __init__(self, rank: int, size: int, slow: Iterable[Union[str, SlowRank]] = (),
                 jitter: Optional[Union[str, Jitter]] = None, seed: int = 0) -> None:
        self.factor = 1.0
        for entry in slow:
            entry = SlowRank.parse(entry) if isinstance(entry, str) else entry
            if entry.rank >= size:
                raise InvalidArgument(f"slow rank {entry.rank} of a job of {size} ranks")
            if entry.rank == rank:
                self.factor = entry.factor
        self.jitter = Jitter.parse(jitter) if isinstance(jitter, str) else (jitter or Jitter())
        self.random = SplitMix64(seed ^ (rank << 32))
        self.slept_seconds = 0.0

    @property
    def delays(self) -> bool:
        return self.factor > 1.0 or self.jitter.kind != "none"

    def delay_after(self, compute_seconds: float) -> float:
        """The slowdown's share after a compute of that long, and the next jitter draw."""
        return (self.factor - 1.0) * compute_seconds + self.jitter.draw(self.random)

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        if not self.delays:
            yield
            return
        started = time.monotonic()
        yield
        delay = self.delay_after(time.monotonic() - started)
        time.sleep(delay)
        self.slept_seconds += delay
