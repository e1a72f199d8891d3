"""The torch backend under torchrun (1 and 3 ranks), DDP against Gloo and
the DDP hooks, and a killed rank through torch.distributed (env://, started
by hand: torchrun's agent would tear the survivors down itself)."""

from __future__ import annotations

import time

import pytest

from conftest import require_passed, run_torchrun, spawn_env_ranks

pytest.importorskip("torch")


@pytest.mark.parametrize("ranks", [1, 3])
def test_backend_collectives(ranks):
    require_passed(run_torchrun(ranks, "torch_backend.py"), ranks)


def test_ddp_same_as_gloo_and_hooks_within_bounds():
    require_passed(run_torchrun(3, "ddp.py"), 3)


def test_killed_rank_raises_through_torch():
    started = time.monotonic()
    processes = spawn_env_ranks(3, "killed.py", "torch", env={"CHORUS_TIMEOUT": "20"})
    outputs = [p.communicate(timeout=120)[0] for p in processes]
    for rank, (process, output) in enumerate(zip(processes[:-1], outputs)):
        assert process.returncode == 0, f"survivor {rank} exit {process.returncode}:\n{output}"
        assert "raised chorus.errors.PeerFailure" in output or "raised chorus.errors.TimeoutError" in output, output
    assert processes[-1].returncode == -9
    assert time.monotonic() - started < 90
