"""Workers that join a running DiLoCo job, and one that leaves it: one joiner
started by chorus-run --join (chorus.init() under CHORUS_JOIN=1), one from
outside through the job file (chorus.join(job_file=...)); rank 1 of the
start leaves once both are in. Each rank r steps its model towards r
(rate 0.1), DiLoCo syncing every 4 steps, going on without dead workers.

Checks: a joiner's first global model is, bit for bit, the one every
member held after the same sync count (each rank writes its global model
after every sync count to FLAGS); every rank that finishes ends on the same
sync count and model; the leaver is no member's lost peer.

    python diloco_joining.py FLAGS ORIGINALS JOINERS [JOB_FILE]
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
leaver = 1


def wait_for(pattern: str, count: int) -> list:
    deadline = time.monotonic() + 90
    while len(found := sorted(flags.glob(pattern))) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"rank {me}: {len(found)} of {count} {pattern} after 90 s")
        time.sleep(0.01)
    return found


def publish(name: str, values: np.ndarray) -> None:
    (flags / f".{name}.tmp").write_bytes(values.tobytes())  # hidden from the globs until whole
    (flags / f".{name}.tmp").rename(flags / name)


model = np.zeros(1001, dtype=np.float32)
scheme = averaging.DiLoCo(comm, [model], period=4, on_peer_failure="continue")
seen = {}


def note() -> None:
    seen[scheme.syncs] = scheme.global_model().copy()


def step() -> None:
    model[:] -= np.float32(0.1) * (model - np.float32(me))
    scheme.end_step()
    note()


note()
if comm.joined:
    entered = scheme.syncs
    (flags / f"joined-{me}").touch()
    for _ in range(12):
        step()
else:
    while len(list(flags.glob("joined-*"))) < joiners:
        step()
        time.sleep(0.002)
    for _ in range(12):
        step()
        if me == leaver:
            break
if me == leaver:
    scheme.leave()
    note()
else:
    scheme.finish()
    note()
for count, values in seen.items():
    publish(f"global-{me}-{count}", values)
publish(f"done-{me}", np.array([scheme.syncs], dtype=np.int64))

if comm.joined:
    first = wait_for(f"global-0-{entered}", 1)[0]
    assert np.array_equal(np.frombuffer(first.read_bytes(), dtype=np.float32), seen[entered]), \
        f"rank {me}: the global model it entered with (after sync {entered}) is not rank 0's"
if me != leaver:
    done = wait_for("done-*", originals + joiners)
    finishers = [p for p in done if p.name != f"done-{leaver}"]
    counts = {int(np.frombuffer(p.read_bytes(), dtype=np.int64)[0]) for p in finishers}
    assert counts == {scheme.syncs}, f"rank {me}: the finishers ended after {counts} syncs"
    for path in finishers:
        rank = path.name.split("-")[1]
        theirs = np.frombuffer(wait_for(f"global-{rank}-{scheme.syncs}", 1)[0].read_bytes(), dtype=np.float32)
        assert np.array_equal(theirs, model), f"rank {me}: rank {rank} ended on another model"
    assert scheme.lost_peers() == [], f"rank {me}: lost {scheme.lost_peers()}"
print(f"rank {me}{' (joined)' if comm.joined else ''}{' (left)' if me == leaver else ''}: DiLoCo with "
      f"{joiners} joiners: ok after {scheme.syncs} syncs", flush=True)
comm.close()
