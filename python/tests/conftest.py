"""Launching multi-rank tests the way users launch: chorus-run for the plain
API, torchrun (python -m torch.distributed.run) for the torch backend, and
plain env:// processes where torchrun's agent would get in the way (a
killed rank: the agent tears the survivors down itself)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import List, Optional

import pytest

HERE = Path(__file__).resolve().parent
WORKERS = HERE / "workers"
ROOT = HERE.parent.parent


def chorus_run_path() -> Path:
    given = os.environ.get("PYTEST_CHORUS_RUN")
    path = Path(given) if given else ROOT / os.environ.get("CHORUS_BUILD_DIR", "build") / "tools" / "chorus-run"
    if not path.exists():
        pytest.skip(f"chorus-run not built at {path} (scripts/build, or set PYTEST_CHORUS_RUN)")
    return path


def _env(extra: Optional[dict] = None) -> dict:
    env = dict(os.environ)
    env.setdefault("CHORUS_TIMEOUT", "60")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra or {})
    return env


def _finish(command: List[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    done = subprocess.run(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout)
    return done


def run_chorus(ranks: int, worker: str, *args: str, timeout: float = 180, env: Optional[dict] = None
               ) -> subprocess.CompletedProcess:
    """chorus-run -n RANKS python workers/WORKER ARGS; the output, ranks prefixed."""
    command = [str(chorus_run_path()), "-n", str(ranks), "--", sys.executable, str(WORKERS / worker), *args]
    return _finish(command, _env(env), timeout)


def run_chorus_program(ranks: int, program: Path, *args: str, timeout: float = 180,
                       env: Optional[dict] = None) -> subprocess.CompletedProcess:
    """chorus-run -n RANKS PROGRAM ARGS (a C++ program of the build)."""
    command = [str(chorus_run_path()), "-n", str(ranks), "--", str(program), *args]
    return _finish(command, _env(env), timeout)


def built_program(relative: str) -> Path:
    """A program of the C++ build (build/ or $CHORUS_BUILD_DIR), e.g. "examples/npz_cat"."""
    return ROOT / os.environ.get("CHORUS_BUILD_DIR", "build") / relative


def run_torchrun(ranks: int, worker: str, *args: str, timeout: float = 300, env: Optional[dict] = None
                 ) -> subprocess.CompletedProcess:
    """python -m torch.distributed.run --nproc-per-node RANKS workers/WORKER ARGS."""
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(ranks),
               "--master-port", str(free_port()), str(WORKERS / worker), *args]
    return _finish(command, _env(env), timeout)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def spawn_env_ranks(ranks: int, worker: str, *args: str, env: Optional[dict] = None) -> List[subprocess.Popen]:
    """RANKS processes with torch's env:// variables, started by hand."""
    port = free_port()
    started = []
    for rank in range(ranks):
        variables = _env(dict(env or {}, RANK=str(rank), WORLD_SIZE=str(ranks), LOCAL_RANK=str(rank),
                              LOCAL_WORLD_SIZE=str(ranks), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)))
        started.append(subprocess.Popen([sys.executable, str(WORKERS / worker), *args], env=variables,
                                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    return started


def spawn_chorus_ranks(ranks: int, worker: str, *args: str, env: Optional[dict] = None) -> List[subprocess.Popen]:
    """RANKS processes with chorus's CHORUS_RANK, CHORUS_SIZE and CHORUS_ADDR set by hand (no launcher)."""
    port = free_port()
    return [subprocess.Popen([sys.executable, str(WORKERS / worker), *args],
                             env=_env(dict(env or {}, CHORUS_RANK=str(rank), CHORUS_SIZE=str(ranks),
                                           CHORUS_ADDR=f"127.0.0.1:{port}", CHORUS_TOKEN=f"{worker}-by-hand")),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            for rank in range(ranks)]


def require_passed(done: subprocess.CompletedProcess, ranks: int, marker: str = "passed") -> str:
    """Exit 0 and every rank printed its marker line."""
    output = done.stdout
    assert done.returncode == 0, f"exit {done.returncode}:\n{output[-6000:]}"
    missing = [r for r in range(ranks) if f"rank {r}: {marker}" not in output]  # lines may interleave
    assert not missing, f"ranks {missing} did not print 'rank R: {marker}':\n{output[-6000:]}"
    return output


def require_survivors_raised(processes: List[subprocess.Popen], within: float, torch_types: bool = False) -> None:
    """The last process was SIGKILLed (by its own hand); every other one
    exited 0 after printing that a chorus PeerFailure or TimeoutError was
    raised (through torch: chorus.torch's, a DistBackendError), all within
    `within` seconds."""
    started = time.monotonic()
    outputs = [p.communicate(timeout=within)[0] for p in processes]
    module = "chorus.torch" if torch_types else "chorus.errors"
    for rank, (process, output) in enumerate(zip(processes[:-1], outputs)):
        assert process.returncode == 0, f"survivor {rank} exit {process.returncode}:\n{output}"
        assert f"raised {module}.PeerFailure" in output or f"raised {module}.TimeoutError" in output, output
        assert not torch_types or "(a DistBackendError)" in output, output
    assert processes[-1].returncode == -9
    assert time.monotonic() - started < within
