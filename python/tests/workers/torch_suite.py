"""Tests of torch's own distributed suite
(torch/testing/_internal/distributed/distributed_test.py, as torch's
test_distributed_spawn.py runs it), with chorus standing in for Gloo:
every process group the suite makes for "gloo" (the default group, and
new_group) is a chorus group, while the suite still believes it runs Gloo.

    torch_suite.py gloo|chorus TEST_NAME...

Exit status 0 when every named test passed (unittest's verbose report on
stderr). WORLD_SIZE (default 3) processes per test, spawned by torch's
MultiProcessTestCase, which imports this file again in each of them: the
stand-in is installed at import.
"""

from __future__ import annotations

import os
import sys
import tempfile
import unittest

os.environ.setdefault("WORLD_SIZE", "3")
os.environ["BACKEND"] = "gloo"  # the suite reads it at import: its Gloo tests run
if "TEMP_DIR" not in os.environ:
    os.environ["TEMP_DIR"] = tempfile.mkdtemp(prefix="chorus-torch-suite-")
STAND_IN = os.environ.setdefault("CHORUS_TORCH_SUITE_BACKEND", sys.argv[1] if len(sys.argv) > 1 else "gloo")

import torch.distributed as dist  # noqa: E402

if STAND_IN == "chorus":
    import chorus.torch  # noqa: F401,E402 - registers the backend

    _init, _new_group = dist.init_process_group, dist.new_group

    def _chorus_for_gloo(backend):
        return "chorus" if backend in (None, "gloo", dist.Backend.GLOO) else backend

    def init_process_group(backend=None, *args, **kwargs):
        return _init(_chorus_for_gloo(backend), *args, **kwargs)

    def new_group(ranks=None, timeout=None, backend=None, *args, **kwargs):
        return _new_group(ranks, timeout, _chorus_for_gloo(backend), *args, **kwargs)

    dist.init_process_group, dist.new_group = init_process_group, new_group
    dist.distributed_c10d.init_process_group = init_process_group
    dist.distributed_c10d.new_group = new_group

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest, TestDistBackend)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    def setUp(self):
        super().setUp()
        self._spawn_processes()


if __name__ == "__main__":
    names = sys.argv[2:]
    suite = unittest.TestSuite(TestDistBackendWithSpawn(name) for name in names)
    result = unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() and not result.skipped else 1)
