"""On a real GPU (marked `gpu`; skipped with the reason where
torch.cuda.is_available() is false): torch CUDA tensors through every
collective and point-to-point call under chorus-run, on torch's current
stream and on a stream given as `stream=`, checked against CPU references;
the torch backend on CUDA tensors (collectives, Work, batch_isend_irecv,
DDP with every hook) under torchrun.
scripts/test-gpu runs these with the C++ gpu tests."""

from __future__ import annotations

import pytest

from conftest import require_passed, run_chorus, run_torchrun

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: torch.cuda.is_available() is false"),
]


@pytest.mark.parametrize("ranks", [1, 2])
def test_torch_cuda_tensors(ranks):
    require_passed(run_chorus(ranks, "gpu_tensors.py"), ranks)


@pytest.mark.parametrize("backend", ["chorus", "cpu:chorus,cuda:chorus", "cpu:gloo,cuda:chorus"])
def test_torch_backend_on_cuda(backend):
    """The chorus backend on CUDA tensors under torchrun: one rank per GPU, two at most."""
    ranks = max(1, min(2, torch.cuda.device_count()))
    require_passed(run_torchrun(ranks, "torch_cuda.py", backend), ranks)
