"""The torch backend under torchrun (1 and 3 ranks), DDP against Gloo and
the DDP hooks, and a killed rank through torch.distributed (env://, started
by hand: torchrun's agent would tear the survivors down itself)."""

from __future__ import annotations

import pytest

from conftest import require_passed, require_survivors_raised, run_torchrun, spawn_env_ranks

pytest.importorskip("torch")


@pytest.mark.parametrize("ranks", [1, 3])
def test_backend_collectives(ranks):
    require_passed(run_torchrun(ranks, "torch_backend.py"), ranks)


def test_ddp_same_as_gloo_and_hooks_within_bounds():
    require_passed(run_torchrun(3, "ddp.py"), 3)


def test_killed_rank_raises_through_torch():
    require_survivors_raised(spawn_env_ranks(3, "killed.py", "torch", env={"CHORUS_TIMEOUT": "20"}), within=90,
                             torch_types=True)
