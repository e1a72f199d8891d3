"""Workers that join a running GoSGD job: one started by chorus-run --join
(chorus.init() under CHORUS_JOIN=1), one from outside through the job file
(chorus.join(job_file=...)). Zero gradients, so after quiesce() the weights
of every rank, joiners included, sum to 1 within 1e-12, and finish() ends
every rank on the mean of the start's models.

    python joining.py FLAGS ORIGINALS JOINERS [JOB_FILE]

FLAGS: a directory the ranks share (joiners touch joined-RANK; every rank
writes weight-RANK); ORIGINALS: the job's ranks at the start.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

import chorus
from chorus import averaging

flags, originals, joiners = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
job_file = sys.argv[4] if len(sys.argv) > 4 else None
comm = chorus.join(job_file=job_file) if job_file else chorus.init()
me = comm.rank


def start(rank: int) -> np.ndarray:
    return np.arange(7, dtype=np.float32) + 10.0 * rank


def step(scheme: averaging.GoSGD) -> None:
    scheme.begin_step()
    scheme.reduce_gradients()
    scheme.end_step()


def wait_for(pattern: str, count: int) -> list:
    deadline = time.monotonic() + 90
    while len(found := sorted(flags.glob(pattern))) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"rank {me}: {len(found)} of {count} {pattern} after 90 s")
        time.sleep(0.01)
    return found


model = start(me)
scheme = averaging.GoSGD(comm, [model], push_probability=0.8, seed=5)
if comm.joined:
    (flags / f"joined-{me}").touch()
    for _ in range(6):
        step(scheme)
else:
    while len(list(flags.glob("joined-*"))) < joiners:
        step(scheme)
        time.sleep(0.005)
    for _ in range(4):
        step(scheme)
scheme.quiesce()
(flags / f"weight-{me}.tmp").write_text(repr(scheme.weight))
(flags / f"weight-{me}.tmp").rename(flags / f"weight-{me}")
scheme.finish()
mean = np.mean([start(r) for r in range(originals)], axis=0)
assert np.allclose(model, mean, rtol=1e-5), f"rank {me}: {model} is not the start's mean {mean}"
total = sum(float(path.read_text()) for path in wait_for("weight-[0-9]*", originals + joiners))
assert abs(total - 1.0) <= 1e-12, f"rank {me}: the weights sum to {total!r}"
print(f"rank {me}{' (joined)' if comm.joined else ''}: GoSGD with {joiners} joiners: weights sum to 1, "
      f"finish() on the mean: ok", flush=True)
comm.close()
