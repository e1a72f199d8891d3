"""PyTorch programs that run on Gloo run the same on the chorus backend: one
script (workers/like_gloo.py), three ranks (env://, started by hand), run on
both backends; every call's outcome must agree, its result or the kind of
error it raised (a RuntimeError, "Timed out", the ranks it names), and
chorus's errors must be torch's types naming the call."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import Dict, Tuple

import pytest

from conftest import WORKERS, spawn_env_ranks

pytest.importorskip("torch")

RANKS = 3
LINE = re.compile(r"^rank (\d+): (.+?) = (\{.*\})$")


def run(backend: str, case: str) -> Tuple[Dict[Tuple[int, str], dict], str]:
    """Each rank's outcomes by (rank, call), and the whole output."""
    processes = spawn_env_ranks(RANKS, "like_gloo.py", backend, case, env={"CHORUS_TIMEOUT": "60"})
    outputs = [p.communicate(timeout=180)[0] for p in processes]
    text = "\n".join(outputs)
    for rank, (process, output) in enumerate(zip(processes, outputs)):
        assert process.returncode == 0, f"{backend} {case}: rank {rank} exit {process.returncode}:\n{output[-4000:]}"
        assert f"rank {rank}: done" in output, f"{backend} {case}: rank {rank} did not finish:\n{output[-4000:]}"
    outcomes = {}
    for line in text.splitlines():
        match = LINE.match(line)
        if match:
            outcomes[(int(match.group(1)), match.group(2))] = json.loads(match.group(3))
    checks = [line for line in text.splitlines() if line.startswith("chorus: ")]
    bad = [line for line in checks if not line.endswith(": ok")]
    assert not bad, "\n".join(bad)
    return outcomes, text


def compared(outcome: dict, keys: Tuple[str, ...]) -> dict:
    """The outcome reduced to what both backends must agree on."""
    if "error" not in outcome:
        return outcome
    return {"error": {key: outcome["error"][key] for key in keys}}


def same_as_gloo(case: str, keys: Dict[int, Tuple[str, ...]]) -> None:
    gloo, gloo_text = run("gloo", case)
    chorus, chorus_text = run("chorus", case)
    assert gloo, f"gloo printed no outcomes:\n{gloo_text[-3000:]}"
    assert set(chorus) == set(gloo), f"calls differ: gloo {sorted(gloo)}, chorus {sorted(chorus)}"
    for (rank, call), expected in gloo.items():
        fields = keys.get(rank, keys.get(-1, ("runtime_error", "value_error", "timed_out", "names")))
        assert compared(chorus[(rank, call)], fields) == compared(expected, fields), (
            f"{case}, rank {rank}, {call}: gloo {expected}, chorus {chorus[(rank, call)]}\n{chorus_text[-3000:]}")


def test_subgroups_coalesced_gather_any_source_sparse_and_monitored_barrier_as_on_gloo():
    same_as_gloo("working", {})


# Rank 0 names the ranks that did not come; the others raise too (Gloo's
# wording depends on whether rank 0 had exited), naming rank 0 and
# themselves. (Gloo says "Timed out" only where it chains its recv's error.)
# torch_words, barrier_timeout_words: the patterns torch's own tests (and
# user code) match these errors with, as Gloo's messages match them.
@pytest.mark.parametrize("case", ["absent_one", "absent_all"])
def test_monitored_barrier_names_who_did_not_come(case):
    same_as_gloo(case, {-1: ("runtime_error", "names", "torch_words")})


def test_monitored_barrier_without_rank_0_names_it():
    same_as_gloo("absent_root", {-1: ("runtime_error", "names", "torch_words")})


def test_monitored_barrier_with_no_time_says_rank_0_timed_out():
    same_as_gloo("zero_timeout", {0: ("runtime_error", "torch_words")})


# Gloo's barrier timeout names no rank; chorus's names the peer it waited on.
def test_barrier_timeout_in_torch_wording_and_types():
    same_as_gloo("barrier_alone", {0: ("runtime_error", "value_error", "timed_out", "barrier_timeout_words")})


# Every attribute of torch's ProcessGroup, and of the Backend torch finds
# behind the group for CPU tensors (a chorus group is its own), gives the
# same kind of answer as on Gloo: a value of the same type, a callable, or
# the same error; feature probes like hasattr(group, "supports_window")
# answer instead of recursing.
def test_every_attribute_answers_as_on_gloo():
    same_as_gloo("attributes", {})


# torch's own tests (its distributed_test.py, as test_distributed_spawn.py
# runs it, 3 processes each), with chorus standing in for every Gloo group
# (workers/torch_suite.py): they match chorus's errors with Gloo's words.
TORCH_SUITE = ["test_barrier_timeout_full_group", "test_monitored_barrier_gloo",
               "test_monitored_barrier_gloo_subgroup", "test_monitored_barrier_gloo_rank_0_timeout"]


def test_torch_suite_barrier_timeout_and_monitored_barrier_tests_pass_on_chorus(tmp_path):
    done = subprocess.run([sys.executable, str(WORKERS / "torch_suite.py"), "chorus", *TORCH_SUITE],
                          env=dict(os.environ, TEMP_DIR=str(tmp_path), CHORUS_TIMEOUT="60", OMP_NUM_THREADS="1"),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-6000:]
    assert f"Ran {len(TORCH_SUITE)} tests" in done.stdout, done.stdout[-6000:]  # none skipped: exit 0 says so
