"""CUDA arrays through the Python binding, without a GPU: chorus._testing's
fake device (memory the host cannot touch, exported as DLPack kDLCUDA)
carries every collective, point-to-point and non-blocking call under
chorus-run, staged and direct; with no device installed a CUDA array is a
clear Unavailable."""

from __future__ import annotations

import subprocess
import sys

import pytest

from conftest import _env, require_passed, require_survivors_raised, run_chorus, spawn_chorus_ranks


@pytest.mark.parametrize("ranks", [1, 3])
def test_device_arrays_staged(ranks):
    require_passed(run_chorus(ranks, "device_arrays.py", "staged"), ranks)


@pytest.mark.parametrize("ranks", [1, 3])
def test_device_arrays_through_nccl(ranks):
    """chorus.nccl.connect's communicator over chorus's NCCL host adapter on the fake device: every collective,
    blocking send/recv, split; host memory and bitwise ops over its chorus communicator."""
    require_passed(run_chorus(ranks, "device_arrays.py", "nccl"), ranks)


def test_device_arrays_direct():
    require_passed(run_chorus(3, "device_arrays.py", "direct", env={"CHORUS_CUDA_PATH": "direct"}), 3)


NO_DEVICE = """
import numpy as np, chorus, chorus._testing
array = chorus._testing.fake_device(install=False).upload(np.ones(4, np.float32))
comm = chorus.init()
try:
    comm.allreduce(array)
except (chorus.Unavailable, chorus.InvalidArgument) as refused:
    print(type(refused).__name__, refused)
try:
    chorus.nccl.connect(comm)
    print("nccl: connected")
except chorus.Unavailable as refused:
    print("nccl:", type(refused).__name__, refused)
"""


def test_a_cuda_array_chorus_cannot_reach_is_refused():
    """The fake's arrays are DLPack CUDA arrays, and here no one installed the fake: with no GPU (or a build
    without CUDA) that is Unavailable; on a GPU, whose runtime does not know the address, InvalidArgument.
    chorus.nccl.connect is Unavailable where there is no GPU, and connects where there is. Never a crash."""
    done = subprocess.run([sys.executable, "-c", NO_DEVICE], env=_env(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=60)
    assert done.returncode == 0, done.stdout
    import torch

    if torch.cuda.is_available():
        assert "InvalidArgument" in done.stdout and "does not know its address" in done.stdout, done.stdout
        assert "nccl: connected" in done.stdout, done.stdout
    else:
        assert "Unavailable" in done.stdout, done.stdout
        assert "no CUDA device" in done.stdout or "without the CUDA toolkit" in done.stdout, done.stdout
        assert "nccl: Unavailable" in done.stdout, done.stdout  # NCCL says why: no driver, or not built


@pytest.mark.parametrize("ranks", [1, 3])
def test_schemes_on_device_parameters(ranks):
    """Every scheme on fake-device parameters: the synchronous ones end with the host run's bits."""
    require_passed(run_chorus(ranks, "schemes_on_device.py"), ranks)


@pytest.mark.parametrize("ranks", [1, 3])
def test_schemes_through_nccl(ranks):
    """Every scheme given chorus.nccl's communicator (the host adapter on the fake device): allreduce-SGD, local
    SGD, EASGD and D-PSGD on NCCL end with the bits of the host run on the chorus communicator; the others run
    on its chorus side; a scheme whose NCCL communicator was closed says so."""
    require_passed(run_chorus(ranks, "schemes_on_device.py", "nccl"), ranks)


def test_killed_rank_on_an_nccl_communicator():
    """A rank of an NCCL communicator (the host adapter on the fake device) is SIGKILLed mid-allreduce, without
    a launcher: every survivor gets a chorus exception within the timeout, never a hang."""
    require_survivors_raised(spawn_chorus_ranks(3, "killed.py", "nccl", env={"CHORUS_TIMEOUT": "20"}), within=60)
