"""The plain API and the schemes over several ranks, under chorus-run (rank
counts 1 to 4; sizes that do not divide evenly, zero and one element), and
a killed rank without a launcher."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from conftest import (WORKERS, _env, chorus_run_path, require_passed, require_survivors_raised, run_chorus,
                      spawn_chorus_ranks)


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_collectives(ranks):
    require_passed(run_chorus(ranks, "collectives.py"), ranks)


@pytest.mark.parametrize("ranks", [1, 3])
def test_schemes(ranks):
    require_passed(run_chorus(ranks, "schemes.py"), ranks)


def test_workers_join_a_running_gosgd(tmp_path):
    """One worker joins through chorus-run --join (chorus.init() under CHORUS_JOIN=1), another from outside
    through the job file (chorus.join): GoSGD's weights still sum to 1 and finish() is the start's mean."""
    originals, job_file = 3, tmp_path / "job.env"
    worker = [sys.executable, str(WORKERS / "joining.py"), str(tmp_path), str(originals), "2"]
    job = subprocess.Popen([str(chorus_run_path()), "-n", str(originals), "--join", "1@0.3", "--job-file",
                            str(job_file), "--", *worker], env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while not job_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    outside = subprocess.run([*worker, str(job_file)], env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=180)
    output = job.communicate(timeout=180)[0]
    assert outside.returncode == 0 and job.returncode == 0, f"{output[-6000:]}\n{outside.stdout[-3000:]}"
    everyone = output + outside.stdout
    assert everyone.count("finish() on the mean: ok") == originals + 2, everyone[-6000:]
    assert everyone.count("(joined)") == 2, everyone[-6000:]


def test_workers_join_and_leave_a_running_diloco(tmp_path):
    """DiLoCo: a joiner through chorus-run --join and one through the job file enter with the global model
    their peers hold at that sync, bit for bit; rank 1 leaves; the others finish on one model."""
    originals, job_file = 3, tmp_path / "job.env"
    worker = [sys.executable, str(WORKERS / "diloco_joining.py"), str(tmp_path), str(originals), "2"]
    job = subprocess.Popen([str(chorus_run_path()), "-n", str(originals), "--join", "1@0.3", "--job-file",
                            str(job_file), "--", *worker], env=_env(), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    while not job_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    outside = subprocess.run([*worker, str(job_file)], env=_env(), stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=180)
    output = job.communicate(timeout=180)[0]
    assert outside.returncode == 0 and job.returncode == 0, f"{output[-6000:]}\n{outside.stdout[-3000:]}"
    everyone = output + outside.stdout
    assert everyone.count(": ok after") == originals + 2, everyone[-6000:]
    assert everyone.count("(joined)") == 2 and everyone.count("(left)") == 1, everyone[-6000:]


def test_killed_rank_gives_survivors_an_exception():
    require_survivors_raised(spawn_chorus_ranks(3, "killed.py", "plain", env={"CHORUS_TIMEOUT": "20"}), within=60)
