"""The plain API in one process (a job of one rank): arrays as chorus takes
them, bad input refused before anything is written, codecs, errors."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import chorus


@pytest.fixture(scope="module")
def comm():
    with chorus.init(timeout=30) as made:
        yield made


DTYPES = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
          np.float16, np.float32, np.float64, np.bool_]


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_in_and_out_of_place(comm, dtype):
    values = (np.arange(11) % 3).astype(dtype)
    kept = values.copy()
    out = np.zeros_like(values)
    assert comm.allreduce(values, out=out) is out
    np.testing.assert_array_equal(out, kept)
    np.testing.assert_array_equal(values, kept)
    assert comm.allreduce(values, "max") is values
    np.testing.assert_array_equal(values, kept)
    np.testing.assert_array_equal(comm.allgather(values), kept[None, :])


def test_shapes_are_kept(comm):
    grid = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert comm.allgather(grid).shape == (1, 3, 4)
    assert comm.reduce_scatter(grid).shape == (3, 4)
    comm.allreduce(grid[1:])  # a contiguous slice is taken where it is
    np.testing.assert_array_equal(grid, np.arange(12, dtype=np.float32).reshape(3, 4))


def test_torch_tensors_zero_copy(comm):
    torch = pytest.importorskip("torch")
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool):
        t = torch.ones(5, dtype=dtype)
        assert comm.allreduce(t) is t
        assert comm.allgather(t).dtype == dtype
    t = torch.arange(6.0)
    with pytest.raises(chorus.InvalidArgument, match="overlap"):
        comm.allreduce(t[2:], out=t[:4])  # overlapping views of one tensor
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert comm.allgather(t[1:4]).tolist() == [[1.0, 2.0, 3.0]]  # a view's offset into its storage
    kept = torch.nn.Parameter(torch.arange(3.0), requires_grad=False)  # a subclass: torch's __dlpack__ path
    assert comm.allreduce(kept, "max") is kept and kept.tolist() == [0.0, 1.0, 2.0]
    learnt = torch.arange(3.0).requires_grad_()  # taken as torch's process groups take it
    assert comm.allreduce(learnt, "max") is learnt and learnt.tolist() == [0.0, 1.0, 2.0]


TORCH_BAD = [
    ("a strided view", lambda torch: torch.arange(10.0)[::2], "not contiguous"),
    ("a lazy negation", lambda torch: torch._neg_view(torch.ones(3)), "resolve_neg"),
    ("a lazy conjugate", lambda torch: torch.ones(3, dtype=torch.complex64).conj(), "resolve_conj"),
    ("a sparse tensor", lambda torch: torch.ones(3).to_sparse(), "not an array"),
]


@pytest.mark.parametrize("what,make,message", TORCH_BAD, ids=[b[0] for b in TORCH_BAD])
def test_torch_tensors_chorus_cannot_take_are_refused(comm, what, make, message):
    """torch tensors skip torch's __dlpack__ for its C++ export where that exports them as they are; a lazy
    negated or conjugated view (whose memory holds the values before the negation, which DLPack cannot say, so
    torch's own __dlpack__ exports it wrong) and the rest are refused, with the reason, and left unchanged."""
    torch = pytest.importorskip("torch")
    given = make(torch)
    before = given.to_dense().resolve_conj().resolve_neg().clone()
    with pytest.raises(chorus.InvalidArgument, match=message):
        comm.allreduce(given)
    assert torch.equal(given.to_dense().resolve_conj().resolve_neg(), before)


BAD = [
    ("a strided view", lambda: np.arange(10, dtype=np.float32)[::2], "not contiguous"),
    ("a transposed grid", lambda: np.arange(12, dtype=np.float32).reshape(3, 4).T, "not contiguous"),
    ("complex numbers", lambda: np.ones(3, np.complex64), "complex64"),
    ("a read-only array", lambda: _read_only(np.ones(3, np.float32)), "read-only"),
    ("a list", lambda: [1.0, 2.0], "not an array"),
]


def _read_only(array):
    array.setflags(write=False)
    return array


@pytest.mark.parametrize("what,make,message", BAD, ids=[b[0] for b in BAD])
def test_bad_arrays_raise_and_change_nothing(comm, what, make, message):
    given = make()
    before = np.array(given, copy=True)
    with pytest.raises(chorus.InvalidArgument, match=message) as raised:
        comm.allreduce(given)
    assert raised.value.category == "invalid_argument" and raised.value.operation == "allreduce"
    np.testing.assert_array_equal(np.asarray(given), before)


def test_bad_arguments(comm):
    x = np.ones(4, np.float32)
    out = np.full(5, 7, np.float32)
    with pytest.raises(chorus.InvalidArgument, match="elements"):
        comm.allreduce(x, out=out)
    with pytest.raises(chorus.InvalidArgument, match="element types"):
        comm.allreduce(x, out=np.zeros(4, np.float64))
    with pytest.raises(chorus.InvalidArgument, match="bxor"):
        comm.allreduce(x, "bxor")
    with pytest.raises(chorus.InvalidArgument, match="nonsense"):
        comm.allreduce(x, "nonsense")
    with pytest.raises(chorus.InvalidArgument, match="algo"):
        comm.allreduce(x, algo="chain")
    with pytest.raises(chorus.InvalidArgument, match="float32"):
        comm.allreduce(np.ones(4, np.float64), codec="int8")
    with pytest.raises(chorus.InvalidArgument, match="unknown codec"):
        comm.allreduce(x, codec="zip")
    with pytest.raises(chorus.InvalidArgument, match="root"):
        comm.broadcast(x, 3)
    with pytest.raises(chorus.InvalidArgument):
        comm.reduce_scatter(np.ones(5, np.float32), out=np.zeros(3, np.float32))
    np.testing.assert_array_equal(out, np.full(5, 7, np.float32))
    np.testing.assert_array_equal(x, np.ones(4, np.float32))


def test_errors_are_categories():
    assert issubclass(chorus.InvalidArgument, ValueError)
    for name in ("TimeoutError", "PeerFailure", "InvalidArgument", "Mismatch", "TransportError", "Unavailable"):
        assert issubclass(getattr(chorus, name), chorus.Error)
    assert issubclass(chorus.Error, RuntimeError)


def test_codecs_round_trip_within_their_bound():
    values = np.linspace(-3, 3, 1000, dtype=np.float32)
    bounds = {
        "identity": np.zeros_like(values),
        "fp16": np.abs(values) * 2.0 ** -11,            # round to nearest, 11 significant bits
        "bf16": np.abs(values) * 2.0 ** -8,             # 8 significant bits
        "int8": np.full_like(values, 3.0 / 127 / 2 * 1.0001),  # half a step of max|x|/127 per block
    }
    for name, bound in bounds.items():
        wire = chorus.Codec(name)
        encoded = np.zeros(wire.encoded_bytes(values.size), np.uint8)
        wire.encode(values, encoded)
        decoded = np.zeros_like(values)
        wire.decode(encoded, decoded)
        assert (np.abs(decoded - values) <= bound).all(), name
    assert chorus.Codec("int8", block=64).encoded_bytes(128) == 2 * (4 + 64)
    with pytest.raises(chorus.InvalidArgument, match="takes no block"):
        chorus.Codec("fp16", block=8)


def test_fp8_and_fp4_round_within_half_a_step_of_their_block():
    """fp8/fp4: each block of 32 under the least power of two 2^k that holds its largest magnitude; an
    element is off by at most half a step of its binade, or half the least subnormal step."""
    values = np.linspace(-3, 3, 1000, dtype=np.float32)
    formats = {"fp8_e4m3": (448.0, 3, 7), "fp8_e5m2": (57344.0, 2, 15), "fp4_e2m1": (6.0, 1, 1)}
    for name, (largest, mantissa_bits, bias) in formats.items():
        wire = chorus.Codec(name)
        encoded = np.zeros(wire.encoded_bytes(values.size), np.uint8)
        wire.encode(values, encoded)
        decoded = np.zeros_like(values)
        wire.decode(encoded, decoded)
        for first in range(0, values.size, 32):
            block = values[first:first + 32].astype(np.float64)
            k = int(np.ceil(np.log2(np.abs(block).max() / largest)))
            bound = np.maximum(np.abs(block) * 2.0 ** -(mantissa_bits + 1), 2.0 ** (k - bias - mantissa_bits))
            error = np.abs(decoded[first:first + 32] - block)
            assert (error <= bound).all(), (name, first, error.max())
    assert chorus.Codec("fp4_e2m1").encoded_bytes(64) == 2 * 17
    assert chorus.Codec("fp4_e2m1", block=64).encoded_bytes(64) == 33


def test_one_rank_schemes_keep_the_model(comm):
    model = [np.arange(5, dtype=np.float32), np.zeros(0, np.float32)]
    scheme = chorus.averaging.LocalSGD(comm, model, period=1)
    scheme.step(lambda: None, lambda: model[0].__iadd__(1))
    scheme.finish()
    np.testing.assert_array_equal(model[0], np.arange(5, dtype=np.float32) + 1)
    assert scheme.stats["steps"] == 1


def test_a_closed_communicator_refuses():
    comm = chorus.init()
    comm.close()
    assert comm.closed
    with pytest.raises(chorus.InvalidArgument, match="closed"):
        comm.allreduce(np.ones(2, np.float32))


def test_init_takes_the_progress_modes_chorus_run_does():
    for mode in ("spin", "yield", "block", "auto"):
        # CHORUS_DEBUG=1 logs the mode chosen and why.
        made = subprocess.run([sys.executable, "-c", f"import chorus; chorus.init(progress={mode!r}).close()"],
                              env=dict(os.environ, CHORUS_DEBUG="1"), capture_output=True, text=True, timeout=60)
        assert made.returncode == 0, made.stderr
        if mode == "auto":
            assert "(set in code)" not in made.stderr, made.stderr
        else:
            assert f"progress {mode} (set in code)" in made.stderr, made.stderr
    with pytest.raises(chorus.InvalidArgument, match="spin, yield, block or auto, not 'busy'"):
        chorus.init(progress="busy")
    with pytest.raises(chorus.InvalidArgument, match="positive"):
        chorus.init(timeout=0)
