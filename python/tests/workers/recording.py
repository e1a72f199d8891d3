"""chorus.record in a job: the entries a communicator keeps, a dump on
request, and the same under the torch backend with torch's names.

  chorus-run -n 3 python recording.py entries   every rank's entries agree
  chorus-run -n 1 python recording.py off       CHORUS_RECORD=0: nothing kept
  torchrun --nproc-per-node 3 recording.py torch-names
  torchrun --nproc-per-node 3 recording.py torch-skip
        rank 2 skips an allreduce; the others time out (CHORUS_TIMEOUT), dump
        and fail; torchrun ends rank 2 with SIGTERM, which dumps too
"""

import sys
import time

import numpy as np

import chorus
import chorus.record


def entries_agree():
    comm = chorus.init()
    for count in (0, 1, 1001):
        comm.allreduce(np.ones(count, dtype=np.float32))
    comm.barrier()
    entries = chorus.record.entries(comm)
    assert [e["name"] for e in entries[-4:]] == ["allreduce", "allreduce", "allreduce", "barrier"], entries[-4:]
    last = entries[-2]
    assert (last["count"], last["bytes"], last["type"], last["op"], last["state"]) == (
        1001, 4004, "float32", "sum", "completed"), last
    assert last["algorithm"], last
    seqs = [e["seq"] for e in entries[-4:]]
    assert seqs == list(range(seqs[0], seqs[0] + 4)), seqs
    everyone = comm.allgather(np.array(seqs, dtype=np.int64))
    assert (everyone == everyone[0]).all(), everyone  # numbered alike on every rank
    path = chorus.record.dump(comm)
    record = chorus.record.read(path)
    assert (record["rank"], record["size"], record["reason"]) == (comm.rank, comm.size, "request"), record
    world = [c for c in record["communicators"] if c["id"] == comm._impl.record_id]
    assert world and world[0]["members"] == list(range(comm.size)), record["communicators"]
    dumped = [e for e in world[0]["entries"] if e["seq"] in seqs]  # the allgather above came after them
    assert [(e["seq"], e["name"]) for e in dumped] == [(e["seq"], e["name"]) for e in entries[-4:]], dumped
    print(f"rank {comm.rank}: passed", flush=True)


def nothing_when_off():
    comm = chorus.init()
    comm.allreduce(np.ones(3, dtype=np.float32))
    assert chorus.record.entries(comm) == []
    assert chorus.record.dump(comm) is None and chorus.record.journal(comm) is None
    print(f"rank {comm.rank}: passed", flush=True)


def torch_calls(skip):
    import torch
    import torch.distributed as dist

    import chorus.torch

    dist.init_process_group("chorus")
    rank, size = dist.get_rank(), dist.get_world_size()
    group = dist.distributed_c10d._get_default_group()
    t = torch.ones(10)
    dist.all_reduce(t)
    gathered = torch.empty(10 * size)
    dist.all_gather_into_tensor(gathered, t)
    scattered = torch.empty(10)
    dist.reduce_scatter_tensor(scattered, torch.ones(10 * size))
    dist.broadcast(t, 0)
    names = [e["name"] for e in chorus.record.entries(group)]
    assert names[-4:] == ["allreduce", "allgather_into_tensor", "reduce_scatter_tensor", "broadcast"], names
    if not skip:
        print(f"rank {rank}: passed", flush=True)
        dist.destroy_process_group()
        return
    if rank == 2:
        print(f"rank {rank}: skips the allreduce", flush=True)
        time.sleep(120)  # until torchrun ends it
    else:
        dist.all_reduce(torch.ones(1 << 18))  # 1 MiB: waits for rank 2 until CHORUS_TIMEOUT


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "entries":
        entries_agree()
    elif mode == "off":
        nothing_when_off()
    else:
        torch_calls(mode == "torch-skip")
