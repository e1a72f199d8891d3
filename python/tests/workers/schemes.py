"""One rank of the averaging-scheme tests on NumPy arrays (under chorus-run).

Each rank's model is two arrays (one of them empty, one of an odd size),
its update a fixed step of its own; every rank knows every rank's start and
step, so the synchronous schemes are checked against their closed forms and
the asynchronous ones against what they must keep (consensus inside the
hull of the starting models)."""

from __future__ import annotations

import time

import numpy as np

import chorus
from chorus import averaging
from models import SHAPES, start, step_of

comm = chorus.init()
rank, size = comm.rank, comm.size
checks = 0


def close(what: str, got: list, want: list, tolerance: float = 2e-5) -> None:
    global checks
    for k, (g, w) in enumerate(zip(got, want)):
        error = np.abs(np.asarray(g, np.float64) - np.asarray(w, np.float64))
        assert error.size == 0 or error.max() <= tolerance, f"rank {rank}: {what} tensor {k}: off by {error.max()}"
    checks += 1


def flat(arrays: list) -> np.ndarray:
    return np.concatenate([np.asarray(a, np.float64) for a in arrays])


def run(scheme, model: list, steps: int, update=True) -> None:
    for t in range(steps):
        scheme.begin_step()
        scheme.reduce_gradients()
        if update:
            for x, d in zip(model, step_of(rank, t)):
                x += d
        scheme.end_step()


def test_allreduce_sgd() -> None:
    model = start(rank)
    grads = step_of(rank, 0)
    scheme = averaging.AllreduceSGD(comm, model, grads)
    scheme.begin_step()
    scheme.reduce_gradients()
    want = [np.mean([step_of(r, 0)[k] for r in range(size)], axis=0) for k in range(len(SHAPES))]
    close("allreduce-SGD averages the gradients", grads, want)
    scheme.end_step()
    assert scheme.stats["steps"] == 1


def test_local_sgd() -> None:
    model = start(rank)
    scheme = averaging.LocalSGD(comm, model, period=2)
    run(scheme, model, 1)
    close("local SGD: no averaging before the period", model, [s + d for s, d in zip(start(rank), step_of(rank, 0))])
    scheme.begin_step()
    for x, d in zip(model, step_of(rank, 1)):
        x += d
    scheme.end_step()
    each = [[s + d0 + d1 for s, d0, d1 in zip(start(r), step_of(r, 0), step_of(r, 1))] for r in range(size)]
    close("local SGD averages at the period", model, [np.mean([e[k] for e in each], axis=0) for k in range(3)])


def test_diloco() -> None:
    """One round of DiLoCo (period 2, Nesterov 0.7 / 0.9) against its closed form, from rank 0's start."""
    model = start(rank)
    scheme = averaging.DiLoCo(comm, model, period=2)
    close("DiLoCo starts every rank from rank 0's model", model, start(0))
    run(scheme, model, 2)
    each = [[s + d0 + d1 for s, d0, d1 in zip(start(0), step_of(r, 0), step_of(r, 1))] for r in range(size)]
    mean = [np.mean([np.asarray(e[k], np.float64) for e in each], axis=0) for k in range(len(SHAPES))]
    outer = [np.asarray(s, np.float64) - m for s, m in zip(start(0), mean)]
    want = [np.asarray(s, np.float64) - 0.7 * (1 + 0.9) * g for s, g in zip(start(0), outer)]
    close("DiLoCo's Nesterov outer step", model, want)
    close("the global model is the model", [scheme.global_model()], [flat(want)])
    scheme.finish()
    weighted = start(rank)
    scheme = averaging.DiLoCo(comm, weighted, period=2, outer_lr=1.0, outer_momentum=0.0)
    for t in range(2):
        for x, d in zip(weighted, step_of(rank, t)):
            x += d
        scheme.end_step(samples=rank + 1 + t)
    weights = [2 * r + 3 for r in range(size)]
    want = [sum(w * np.asarray(e[k], np.float64) for w, e in zip(weights, each)) / sum(weights)
            for k in range(len(SHAPES))]
    close("DiLoCo weighs each model by its samples", weighted, want)
    assert scheme.job_samples == sum(weights), scheme.job_samples
    scheme.finish()
    timed = averaging.DiLoCo(comm, start(rank), round_seconds=0.05, fragments=2, overlap_steps=1)
    mine = 0
    for t in range(10 + 10 * rank):  # the ranks stop in turn
        time.sleep(0.01)
        timed.end_step(samples=2)
        mine += 2
    timed.finish()
    assert timed.job_samples == sum(comm.allgather(np.array([mine], np.float64))[r][0] for r in range(size))
    close("DiLoCo by time: every rank ends with the same model", [timed.global_model()],
          [comm.allgather(timed.global_model())[0]], tolerance=0)
    with_codec = averaging.DiLoCo(comm, start(rank), period=1, codec="fp4_e2m1", fragments=2, overlap_steps=0)
    with_codec.end_step()
    with_codec.finish()
    try:
        averaging.DiLoCo(comm, start(rank), period=4, overlap_steps=4)
    except chorus.InvalidArgument as e:
        assert "must be below the period" in str(e), e
    else:
        raise AssertionError("DiLoCo took overlap_steps == period")


def test_job_progress() -> None:
    """Every rank's samples in every rank's count of the job's (flushed at once with no interval)."""
    progress = averaging.JobProgress(comm, "schemes test", interval=0.0)
    for _ in range(rank + 1):
        progress.add(7 + rank)
    assert progress.own == (rank + 1) * (7 + rank), progress.own
    comm.barrier()
    progress.flush()
    assert progress.samples == sum((r + 1) * (7 + r) for r in range(size)), progress.samples


def ring_weights(n: int) -> np.ndarray:
    w = np.zeros((n, n))
    for r in range(n):
        for offset in (0, 1, -1):
            w[r][(r + offset) % n] += 1.0 / 3.0
    return w


def test_dpsgd() -> None:
    model = start(rank)
    scheme = averaging.DPSGD(comm, model)  # a ring by default
    run(scheme, model, 1)
    w = ring_weights(size)
    want = [sum(w[rank][j] * start(j)[k] for j in range(size)) + step_of(rank, 0)[k] for k in range(3)]
    close("D-PSGD on a ring: W x + own step", model, want)

    weights = [[0.5 if i == j else 0.5 / (size - 1) if size > 1 else 0.5 for j in range(size)] for i in range(size)]
    if size == 1:
        weights = [[1.0]]
    model = start(rank)
    scheme = averaging.DPSGD(comm, model, topology=chorus.Topology.from_weights(weights), codec="fp16")
    run(scheme, model, 1, update=False)
    want = [sum(weights[rank][j] * start(j)[k] for j in range(size)) for k in range(3)]
    close("D-PSGD with user weights and fp16", model, want, tolerance=2e-3)
    scheme.finish()
    close("D-PSGD finish: every rank the average", model,
          [np.mean([comm.allgather(m)[r] for r in range(size)], axis=0) for m in model], tolerance=0)


def test_easgd() -> None:
    model = start(rank)
    alpha = 0.25
    scheme = averaging.EASGD(comm, model, alpha=alpha, tau=1)
    centre = np.mean([flat(start(r)) for r in range(size)], axis=0)
    close("EASGD centre starts at the average", [scheme.centre()], [centre])
    run(scheme, model, 1)
    differences = [flat(start(r)) - centre for r in range(size)]
    want_model = flat(start(rank)) + flat(step_of(rank, 0)) - alpha * differences[rank]
    want_centre = centre + alpha * np.sum(differences, axis=0)
    close("EASGD model", [flat(model)], [want_model])
    close("EASGD centre", [scheme.centre()], [want_centre])
    scheme.finish()
    close("EASGD finish: the centre", [flat(model)], [want_centre])


def consensus_in_hull(what: str, model: list) -> None:
    global checks
    everyone = comm.allgather(flat(model).astype(np.float32))
    assert np.all(everyone == everyone[0]), f"{what}: ranks differ after finish"
    starts = np.stack([flat(start(r)) for r in range(size)])
    low, high = starts.min(axis=0) - 1e-5, starts.max(axis=0) + 1e-5
    assert np.all((everyone[0] >= low) & (everyone[0] <= high)), f"{what}: outside the starting models' hull"
    checks += 1


def test_asynchronous() -> None:
    model = start(rank)
    scheme = averaging.GoSGD(comm, model, push_probability=1.0, seed=3)
    run(scheme, model, 5, update=False)
    scheme.finish()
    consensus_in_hull("GoSGD", model)
    assert size == 1 or scheme.stats["messages_sent"] > 0

    # Gossip without updates keeps sum(weight * model) at the mean of the
    # starting models; after quiesce() the weights sum to 1.
    model = start(rank)
    scheme = averaging.GoSGD(comm, model, push_probability=1.0, seed=5)
    run(scheme, model, 4, update=False)
    scheme.quiesce()
    mean = np.mean([flat(start(r)) for r in range(size)], axis=0)
    close("GoSGD's weights after quiesce()", [comm.allreduce(np.array([scheme.weight]))], [np.ones(1)], 1e-12)
    close("GoSGD's consensus after quiesce()", [comm.allreduce(scheme.weight * flat(model))], [mean])
    run(scheme, model, 2, update=False)
    scheme.finish()
    close("GoSGD's finish()", [flat(model)], [mean])

    model = start(rank)
    scheme = averaging.EASGDAsync(comm, model, alpha=0.5, tau=1, server=size - 1)
    close("async EASGD starts from the server's model", model, start(size - 1), tolerance=0)
    run(scheme, model, 3, update=False)
    scheme.finish()
    consensus_in_hull("async EASGD", model)


def test_leave() -> None:
    """The last rank leaves GoSGD on purpose after 2 steps: the others finish() on the mean of every starting
    model, the leaver's included (its weight was handed over); a synchronous scheme cannot be left."""
    global checks
    if size < 2:
        return
    model = start(rank)
    scheme = averaging.GoSGD(comm, model, push_probability=1.0, seed=7)
    if rank == size - 1:
        run(scheme, model, 2, update=False)
        scheme.leave()
        assert scheme.weight == 0.0
        checks += 1
    else:
        run(scheme, model, 5, update=False)
        scheme.finish()
        close("GoSGD's finish() after a rank left", [flat(model)], [np.mean([flat(start(r)) for r in range(size)],
                                                                          axis=0)])
    stayers = comm.split(0 if rank < size - 1 else 1)  # the leaver's own, alone
    stayers.barrier()
    try:
        averaging.LocalSGD(stayers, start(rank), period=2).leave()
        raise AssertionError("a synchronous scheme was left")
    except chorus.InvalidArgument as refused:
        assert "synchronous" in str(refused)
        checks += 1
    stayers.close()


def test_middle() -> None:
    """TreeEASGD and the parameter server: the spectrum's middle."""
    global checks
    model = start(rank)
    scheme = averaging.TreeEASGD(comm, model, alpha=0.3, tau_up=1, tau_down=2, fanout=2)
    run(scheme, model, 4, update=False)
    scheme.finish()
    consensus_in_hull("TreeEASGD", model)

    # Plain SGD applies every gradient once, scaled by 1 / workers, in every
    # mode: every rank ends at start(0) - lr * sum_t mean_r g_r(t) (BSP: in
    # rounds, so the same sums in the same order).
    lr = 0.5
    for mode, by_get, by_accumulate in (("bsp", False, False), ("ssp", False, False), ("downpour", False, False),
                                        ("downpour", True, False), ("downpour", True, True)):
        model = start(rank)
        grads = [np.zeros(n, np.float32) for n in SHAPES]
        policy = "raise" if mode == "bsp" else "continue"
        scheme = averaging.ParameterServer(comm, model, grads, mode=mode, staleness=1, learning_rate=lr, momentum=0.0,
                                           on_peer_failure=policy, fetch_by_get=by_get,
                                           push_by_accumulate=by_accumulate)
        for t in range(3):
            scheme.begin_step()
            for g, d in zip(grads, step_of(rank, t)):
                g[...] = d
            scheme.reduce_gradients()
            scheme.end_step()
        scheme.finish()
        everyone = comm.allgather(flat(model).astype(np.float32))
        assert np.all(everyone == everyone[0]), f"{mode}: ranks differ after finish"
        assert scheme.lost_peers() == []
        checks += 1
        want = flat(start(0)) - lr * sum(np.mean([flat(step_of(r, t)) for r in range(size)], axis=0) for t in range(3))
        close(f"{mode} parameter server (fetch by get: {by_get}, push by accumulate: {by_accumulate})", [flat(model)],
              [want])
        if mode == "bsp":
            served = scheme.server_stats()
            assert served["staleness_max"] == 0 and served["gradients_applied"] == 3 * size, served

    for options, why in (({"mode": "bogus"}, "mode"), ({"mode": "bsp", "on_peer_failure": "continue"}, "BSP")):
        try:
            averaging.ParameterServer(comm, start(rank), step_of(rank, 0), **options)
        except chorus.InvalidArgument as failure:
            assert why in str(failure), str(failure)
            checks += 1
        else:
            raise AssertionError(f"ParameterServer took {options}")


def test_windows() -> None:
    """chorus.Window against serial references, and the schemes built on it."""
    global checks
    model = start(rank)
    sources = sorted({(rank - 1) % size, (rank + 1) % size} - {rank})
    win = chorus.Window(comm, model, sources=sources)
    assert win.size == sum(SHAPES)
    win.put(weights={t: 0.5 for t in win.targets})
    win.wait_versions(1)
    win.update(0.5, {s: 0.25 for s in sources}, reset=True)  # the slots start the accumulates from 0
    want = [0.5 * start(rank)[k] + sum(0.25 * np.float32(0.5) * start(s)[k] for s in sources) for k in range(3)]
    close("Window put + update", model, want)
    p_want = 0.5 + 0.25 * 0.5 * len(sources)
    close("Window p", [np.array([win.p])], [np.array([p_want])], 1e-12)
    comm.barrier()  # nobody accumulates into a slot its reader has not updated from yet
    for rounds in range(3):
        win.accumulate(flat(step_of(rank, rounds)).astype(np.float32))
    win.quiesce()
    got = win.collect(reset=True)
    for s in sources:
        value, p = got[s]
        close("Window accumulate", [value], [sum(flat(step_of(s, t)) for t in range(3))])
        assert p == 3 * p_want
    win.get()
    for s, (value, p) in win.collect().items():
        close("Window get", [value], [flat(start(s))], tolerance=0)
    comm.barrier()  # every rank has read the get before the puts below land

    # Non-blocking forms: a Request each; an update reaches the tensors once found complete.
    def after_update(r: int) -> list:
        around = sorted({(r - 1) % size, (r + 1) % size} - {r})
        return [0.5 * start(r)[k] + sum(0.25 * np.float32(0.5) * start(s)[k] for s in around) for k in range(3)]

    sent = win.put(blocking=False)
    assert isinstance(sent, chorus.Request)
    sent.wait()
    win.wait_versions(1)
    before = [t.copy() for t in model]
    pending = win.update(0.5, {s: 0.5 / len(sources) for s in sources}, blocking=False)
    assert all(np.array_equal(t, b) for t, b in zip(model, before)), "a non-blocking update wrote before completing"
    while not pending.test():
        pass
    want = [0.5 * after_update(rank)[k] + sum(0.5 / len(sources) * after_update(s)[k] for s in sources)
            for k in range(3)]
    close("Window non-blocking put + update", model, want)
    fetched = win.get(blocking=False)
    fetched.wait()
    for s, (value, p) in win.collect().items():
        close("Window non-blocking get", [value], [flat(start(s))], tolerance=0)
    comm.barrier()  # every rank has read its get before this put lands
    assert win.put(blocking=True) is None

    # in_quiesce: rank 0 enters quiesce() at once; a rank that writes to it sees it there, then enters.
    assert not any(win.in_quiesce(t) for t in win.targets)  # nobody has passed the barrier below
    comm.barrier()
    if rank != 0 and 0 in win.targets:
        deadline = time.monotonic() + 30
        while not win.in_quiesce(0) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert win.in_quiesce(0), "rank 0's notice that it entered quiesce() never came"
    win.quiesce()
    assert not any(win.in_quiesce(t) for t in win.targets)  # free() below is a barrier: none is in again

    # ready: quiesce() read every entry, so each target has room again (once its counter comes back);
    # two accumulates it has not read fill this rank's slot there.
    deadline = time.monotonic() + 30
    while not all(win.ready(t) for t in win.targets) and time.monotonic() < deadline:
        time.sleep(0.001)
    assert all(win.ready(t) for t in win.targets), "every entry was read in quiesce(), yet a target has no room"
    comm.barrier()
    win.accumulate()
    win.accumulate()
    assert not any(win.ready(t) for t in win.targets), "two accumulates unread, yet a target has room"
    comm.barrier()  # no rank reads (in quiesce()) before every rank has asked
    win.quiesce()
    win.free()
    checks += 1

    model = start(rank)
    scheme = averaging.OneSidedGossip(comm, model)
    run(scheme, model, 6 + rank, update=False)
    scheme.quiesce()
    close("one-sided gossip's weights after quiesce()", [comm.allreduce(np.array([scheme.weight]))],
          [np.array([float(size)])], 1e-12)
    scheme.finish()
    close("one-sided gossip's finish()", [flat(model)], [np.mean([flat(start(r)) for r in range(size)], axis=0)])

    results = []
    for one_sided in (False, True):
        model = start(rank)
        scheme = averaging.DPSGD(comm, model, codec="fp16", one_sided=one_sided)
        run(scheme, model, 4)
        results.append(flat(model))
    close("D-PSGD on a window, bit for bit", [results[1]], [results[0]], tolerance=0)


def test_bad_input() -> None:
    global checks
    for bad, why in (([np.zeros(3, np.float64)], "float32"), ([np.zeros(6, np.float32)[::2]], "contiguous"), ([], "no")):
        try:
            averaging.LocalSGD(comm, bad)
        except chorus.InvalidArgument as failure:
            assert why in str(failure), str(failure)
            checks += 1
        else:
            raise AssertionError(f"LocalSGD took {bad}")


test_allreduce_sgd()
test_local_sgd()
test_diloco()
test_job_progress()
test_dpsgd()
test_easgd()
test_asynchronous()
test_leave()
test_middle()
test_windows()
test_bad_input()
comm.barrier()
print(f"rank {rank}: passed {checks} checks", flush=True)
comm.close()
