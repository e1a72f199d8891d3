"""The plain API and the schemes over several ranks, under chorus-run (rank
counts 1 to 4; sizes that do not divide evenly, zero and one element), and
a killed rank without a launcher."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import WORKERS, _env, free_port, require_passed, require_survivors_raised, run_chorus


@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_collectives(ranks):
    require_passed(run_chorus(ranks, "collectives.py"), ranks)


@pytest.mark.parametrize("ranks", [1, 3])
def test_schemes(ranks):
    require_passed(run_chorus(ranks, "schemes.py"), ranks)


def test_killed_rank_gives_survivors_an_exception():
    port, ranks = free_port(), 3
    processes = [subprocess.Popen([sys.executable, str(WORKERS / "killed.py"), "plain"],
                                  env=_env({"CHORUS_RANK": str(r), "CHORUS_SIZE": str(ranks),
                                            "CHORUS_ADDR": f"127.0.0.1:{port}", "CHORUS_TOKEN": "killed-test",
                                            "CHORUS_TIMEOUT": "20"}),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for r in range(ranks)]
    require_survivors_raised(processes, within=60)
