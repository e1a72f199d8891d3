"""The C++ .npz reader and writer of the LibTorch jet tagger (examples/jets/npz.hpp), through npz_cat,
against NumPy: what np.savez and np.savez_compressed write is read back value for value (every type the
sample uses, empty and 0-d arrays, a unicode string), what npz::write writes np.load reads back equal, and
a damaged or truncated file is a clear error rather than wrong numbers."""

from __future__ import annotations

import subprocess
import zipfile

import numpy as np
import pytest

from conftest import built_program

NPZ_CAT = built_program("examples/npz_cat")


@pytest.fixture(scope="module")
def npz_cat():
    assert NPZ_CAT.exists(), f"{NPZ_CAT} is not built (scripts/build builds it where zlib is found)"
    return NPZ_CAT


def arrays() -> dict:
    rng = np.random.default_rng(11)
    return {"images": rng.random((3, 4, 5), dtype=np.float32), "jets": rng.standard_normal((7, 4)),
            "labels": rng.integers(0, 2, 9).astype(np.uint8), "counts": np.arange(-3, 4, dtype=np.int64),
            "small": np.array([2**31 - 1, -2**31], np.int32), "none": np.zeros((0, 30, 3), np.float32),
            "one": np.array([0.1], np.float32), "scalar": np.array(2.5),
            "settings": np.array('{"seed": 7, "note": "W\u00b1 \u2192 q q\u0304"}')}


def parsed(output: str) -> dict:
    """npz_cat's lines: name, type, shape, then the values (or the text)."""
    found = {}
    for line in output.splitlines():
        name, descr, rest = line.split(" ", 2)
        shape_text, _, values = rest.partition(")")
        shape = tuple(int(d) for d in shape_text.strip("(").split(",") if d)
        found[name] = (descr, shape, values.strip())
    return found


@pytest.mark.parametrize("save", [np.savez, np.savez_compressed], ids=["stored", "deflated"])
def test_reads_what_numpy_writes(npz_cat, tmp_path, save):
    given = arrays()
    save(tmp_path / "a.npz", **given)
    done = subprocess.run([str(npz_cat), str(tmp_path / "a.npz")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    found = parsed(done.stdout)
    assert set(found) == set(given)
    for name, array in given.items():
        descr, shape, values = found[name]
        assert descr == array.dtype.str and shape == array.shape, name
        if array.dtype.kind == "U":
            assert values == str(array), name
        else:  # %.17g: every float32 and float64 exactly
            read = np.array([float(v) for v in values.split()], dtype=np.float64)
            np.testing.assert_array_equal(read, array.ravel().astype(np.float64), err_msg=name)


def test_writes_what_numpy_reads(npz_cat, tmp_path):
    given = arrays()
    np.savez_compressed(tmp_path / "a.npz", **given)
    done = subprocess.run([str(npz_cat), str(tmp_path / "a.npz"), "--copy", str(tmp_path / "copy.npz")],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "copy.npz") as copy:
        assert set(copy.files) == set(given)
        for name, array in given.items():
            assert copy[name].dtype == array.dtype and copy[name].shape == array.shape, name
            np.testing.assert_array_equal(copy[name], array, err_msg=name)


def test_damage_is_an_error_not_wrong_numbers(npz_cat, tmp_path):
    np.savez(tmp_path / "a.npz", values=np.arange(1000, dtype=np.float32))
    data = bytearray((tmp_path / "a.npz").read_bytes())
    with zipfile.ZipFile(tmp_path / "a.npz") as archive:
        entry = archive.getinfo("values.npy")
    data[entry.header_offset + 30 + len(entry.filename) + 200] ^= 0x40  # inside the array's bytes
    (tmp_path / "flipped.npz").write_bytes(bytes(data))
    (tmp_path / "cut.npz").write_bytes((tmp_path / "a.npz").read_bytes()[:2000])
    np.save(tmp_path / "plain.npy", np.arange(3))
    for name, message in [("flipped.npz", "fails its CRC check"), ("cut.npz", "not a zip file"),
                          ("plain.npy", "not a zip file"), ("absent.npz", "cannot open")]:
        done = subprocess.run([str(npz_cat), str(tmp_path / name)], capture_output=True, text=True, timeout=60)
        assert done.returncode == 1 and message in done.stderr and done.stdout == "", (name, done.stderr)
    np.save(tmp_path / "big_endian.npy", np.arange(3, dtype=">f4"))
    with zipfile.ZipFile(tmp_path / "big.npz", "w") as archive:
        archive.write(tmp_path / "big_endian.npy", "values.npy")
    done = subprocess.run([str(npz_cat), str(tmp_path / "big.npz")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "holds >f4" in done.stderr, done.stderr
