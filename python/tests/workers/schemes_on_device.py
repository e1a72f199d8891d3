"""One rank of the schemes-on-device tests (under chorus-run): every scheme
of chorus.averaging on parameters in chorus._testing's fake device memory
(which the host cannot touch), staged through the router as in C++.

Each synchronous scheme runs twice from the same start with the same
updates, once on host arrays and once on device arrays: the device run must
end with the host run's bits. The asynchronous ones must end in consensus
inside the starting models' hull; the schemes that read parameters on the
host (one-sided gossip, D-PSGD over a window) refuse device parameters.

With the argument `nccl` the device runs go through chorus.nccl.connect's
communicator (chorus's NCCL host adapter on the fake device, as the C++
tests run it): allreduce-SGD, local SGD, EASGD and D-PSGD run on NCCL
(D-PSGD mixing on the device), the others (DiLoCo too) on its chorus side, and the
synchronous ones still end with the bits of the host run on the chorus
communicator."""

from __future__ import annotations

import sys

import numpy as np

import chorus
import chorus._testing
from chorus import averaging
from checking import check, checks, counted
from models import SHAPES, start, step_of

fake = chorus._testing.fake_device()
comm = chorus.init()
rank, size = comm.rank, comm.size
on_nccl = sys.argv[1:] == ["nccl"]
gpus = chorus.nccl.connect(comm) if on_nccl else comm  # what the device runs go through


class Host:
    """Arrays in host memory, as the reference run keeps them, on the chorus communicator."""
    name = "host"
    comm = comm

    @staticmethod
    def make(values: np.ndarray):
        return values.copy()

    @staticmethod
    def read(array) -> np.ndarray:
        return np.array(array)

    @staticmethod
    def write(array, values: np.ndarray) -> None:
        array[...] = values


class Device:
    """Arrays in the fake device's memory, on chorus.nccl's communicator where the run is on NCCL."""
    name = "device"
    comm = gpus
    make = staticmethod(fake.upload)
    read = staticmethod(lambda array: fake.download(array))
    write = staticmethod(fake.write)


def steps(space, scheme, model: list, count: int, update: bool = True) -> None:
    for t in range(count):
        scheme.begin_step()
        scheme.reduce_gradients()
        if update:
            for x, d in zip(model, step_of(rank, t)):
                space.write(x, space.read(x) + d)
        scheme.end_step()


def synchronous(name: str, make_scheme, count: int = 3, update: bool = True, finish: bool = True) -> None:
    """The same scheme on host and on device arrays: the same bits at the end."""
    ends = []
    for space in (Host, Device):
        model = [space.make(x) for x in start(rank)]
        scheme = make_scheme(space, model)
        steps(space, scheme, model, count, update)
        if finish:
            scheme.finish()
        ends.append([space.read(x) for x in model])
    for k, (host, device) in enumerate(zip(*ends)):
        if not np.array_equal(host, device):
            raise AssertionError(f"{name}: tensor {k} on device differs from the host run by "
                                 f"{np.abs(host - device).max()}")
    counted()


def grads_scheme(space, model):
    grads = [space.make(g) for g in step_of(rank, 0)]
    scheme = averaging.AllreduceSGD(space.comm, model, grads)
    scheme.begin_step()
    scheme.reduce_gradients()
    check(f"allreduce-SGD's gradients on {space.name}", np.concatenate([space.read(g) for g in grads]),
          np.mean([np.concatenate(step_of(r, 0)) for r in range(size)], axis=0).astype(np.float32))
    scheme.end_step()
    return scheme


def in_consensus(name: str, model: list) -> None:
    mine = np.concatenate([Device.read(x) for x in model])
    everyone = comm.allgather(mine)
    assert np.all(everyone == everyone[0]), f"{name}: ranks differ after finish"
    starts = np.stack([np.concatenate(start(r)) for r in range(size)])
    inside = (mine >= starts.min(axis=0) - 1e-5) & (mine <= starts.max(axis=0) + 1e-5)
    assert inside.all(), f"{name}: outside the starting models' hull"
    counted()


def refused(name: str, make) -> None:
    model = [Device.make(x) for x in start(rank)]
    try:
        make(model)
        raise AssertionError(f"{name} took device parameters")
    except chorus.InvalidArgument as refusal:
        assert "device memory" in str(refusal) or "CUDA memory" in str(refusal), refusal
    check(f"{name}: refused parameters unchanged", np.concatenate([Device.read(x) for x in model]),
          np.concatenate(start(rank)))


synchronous("allreduce-SGD", grads_scheme, count=0, finish=False)
synchronous("local SGD", lambda space, model: averaging.LocalSGD(space.comm, model, period=2))
synchronous("D-PSGD on a ring", lambda space, model: averaging.DPSGD(space.comm, model))
synchronous("D-PSGD with fp16", lambda space, model: averaging.DPSGD(space.comm, model, codec="fp16"))
synchronous("D-PSGD on an exponential graph with int8",
            lambda space, model: averaging.DPSGD(space.comm, model, topology=chorus.Topology.exponential(size),
                                                 codec="int8"))
synchronous("EASGD", lambda space, model: averaging.EASGD(space.comm, model, alpha=0.25, tau=1))
synchronous("DiLoCo", lambda space, model: averaging.DiLoCo(space.comm, model, period=2), count=5)
synchronous("Streaming DiLoCo with fp4 outer gradients",
            lambda space, model: averaging.DiLoCo(space.comm, model, period=3, fragments=2, overlap_steps=1,
                                                  mixing=0.5, codec="fp4_e2m1"), count=7)

for name, make in (("GoSGD", lambda m: averaging.GoSGD(gpus, m, push_probability=1.0, seed=3)),
                   ("async EASGD", lambda m: averaging.EASGDAsync(gpus, m, alpha=0.5, tau=1, server=size - 1)),
                   ("TreeEASGD", lambda m: averaging.TreeEASGD(gpus, m, alpha=0.3, tau_up=1, tau_down=2, fanout=2))):
    model = [Device.make(x) for x in start(rank)]
    scheme = make(model)
    steps(Device, scheme, model, 4, update=False)
    scheme.finish()
    in_consensus(name, model)

# The parameter server in BSP applies every gradient once, scaled by 1 / workers: every rank ends at
# start(0) - lr * sum_t mean_r g_r(t).
lr = 0.5
model = [Device.make(x) for x in start(rank)]
grads = [Device.make(np.zeros(n, np.float32)) for n in SHAPES]
scheme = averaging.ParameterServer(gpus, model, grads, mode="bsp", learning_rate=lr, momentum=0.0)
for t in range(3):
    scheme.begin_step()
    for g, d in zip(grads, step_of(rank, t)):
        Device.write(g, d)
    scheme.reduce_gradients()
    scheme.end_step()
scheme.finish()
want = np.concatenate(start(0)).astype(np.float64) - lr * sum(
    np.mean([np.concatenate(step_of(r, t)) for r in range(size)], axis=0) for t in range(3))
got = np.concatenate([Device.read(x) for x in model])
assert np.abs(got - want).max() <= 2e-5, f"BSP parameter server on device: off by {np.abs(got - want).max()}"
counted()

refused("one-sided gossip", lambda m: averaging.OneSidedGossip(gpus, m))
refused("a window", lambda m: chorus.Window(comm, m))

if on_nccl:
    # D-PSGD keeps its reference to the NCCL communicator: closing that first makes its next step a clear error.
    model = [Device.make(x) for x in start(rank)]
    scheme = averaging.DPSGD(gpus, model)
    gpus.close()
    try:
        scheme.end_step()
        raise AssertionError("D-PSGD stepped on a closed NCCL communicator")
    except chorus.InvalidArgument as refusal:
        assert "NCCL communicator the scheme runs on is closed" in str(refusal), refusal
    counted()

comm.barrier()
print(f"rank {rank}: passed {checks()} scheme checks on device{' through chorus.nccl' if on_nccl else ''}",
      flush=True)
comm.close()
sys.exit(0)
