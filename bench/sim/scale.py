"""The collectives at scale, simulated: runs bench/sim/simulate's `scale`
mode over platforms, rank counts and sizes, one job at a time, and keeps
every job's rows (a job's CSV is written when it ends, so a campaign that
stops keeps what finished):

    .venv/bin/python bench/sim/scale.py run [--build build] [--out docs/sim_scale]
    .venv/bin/python bench/sim/scale.py report [--out docs/sim_scale] [--write docs/scale.md]

`run` writes OUT/JOB.csv per job; `report` gathers them into OUT.csv, fits
each algorithm's cost model to the simulated points (bench/sim/model.py)
and prints the tables docs/scale.md carries (--write puts them there):
simulated times, the model's predictions up to 65,536 ranks, and the
registry's choice beside the fastest algorithm.
"""
import argparse
import csv
import glob
import os
import subprocess
import sys
import time

KIB = 1024
LOG_STEP = "recursive_doubling,rabenseifner,tree,hierarchical"
EVERY = "ring," + LOG_STEP

# (name, platform, hosts, ranks per host, sizes, algorithms[, SimGrid
# arguments]): the ring's messages grow as n^2 (2 (n - 1) steps of n
# transfers), so it runs to 256 ranks; the others, log2 n steps, to 4,096
# (16,384 at 4 and 64 KiB; 65,536 at 4 KiB: the registry's own choice,
# recursive doubling, and the two that beat it). Past about 30,000
# ranks the stacks come from the heap (sim/run.hpp: a mapping each would
# pass Linux's limit).
JOBS = [
    ("fat-tree-64", "fat-tree", 8, 8, [4 * KIB, 64 * KIB, 1024 * KIB], EVERY),
    ("fat-tree-256", "fat-tree", 32, 8, [4 * KIB, 64 * KIB, 1024 * KIB], EVERY),
    ("fat-tree-1024", "fat-tree", 128, 8, [4 * KIB, 64 * KIB], LOG_STEP),
    ("dragonfly-1024", "dragonfly", 128, 8, [4 * KIB, 64 * KIB], LOG_STEP),
    ("fat-tree-4096", "fat-tree", 512, 8, [4 * KIB, 64 * KIB], LOG_STEP),
    ("edge-64", "edge", 16, 4, [4 * KIB, 64 * KIB, 1024 * KIB], EVERY),
    ("fat-tree-1024-1m", "fat-tree", 128, 8, [1024 * KIB], LOG_STEP),
    ("fat-tree-16384", "fat-tree", 2048, 8, [4 * KIB, 64 * KIB], LOG_STEP),
    ("fat-tree-65536", "fat-tree", 8192, 8, [4 * KIB], "hierarchical,tree",
     ["--cfg=contexts/guard-size:0", "--cfg=contexts/stack-size:64"]),
]


def run(args):
    os.makedirs(args.out, exist_ok=True)
    simulate = os.path.join(args.build, "bench", "simulate")
    for name, platform, hosts, per_host, sizes, algorithms, *simgrid in JOBS:
        target = os.path.join(args.out, name + ".csv")
        if os.path.exists(target) and not args.again:
            continue
        command = [simulate, "scale", platform, str(hosts), str(per_host), ",".join(map(str, sizes)), algorithms]
        command += simgrid[0] if simgrid else []
        started = time.monotonic()
        done = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        seconds = time.monotonic() - started
        if done.returncode != 0:
            print(f"{name}: exit {done.returncode} after {seconds:.0f} s\n{done.stderr[-2000:]}", flush=True)
            continue
        with open(target, "w") as out:
            out.write(done.stdout)
        print(f"{name}: {seconds:.0f} s", flush=True)


def rows_of(out):
    rows = []
    for path in sorted(glob.glob(os.path.join(out, "*.csv"))):
        with open(path) as source:
            rows.extend(csv.DictReader(source))
    for row in rows:
        row["ranks"], row["bytes"] = int(row["ranks"]), int(row["bytes"])
        row["simulated_us"] = float(row["simulated_us"])
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=["run", "report"])
    parser.add_argument("--build", default="build")
    parser.add_argument("--out", default="docs/sim_scale")
    parser.add_argument("--timeout", type=int, default=4 * 3600)
    parser.add_argument("--again", action="store_true", help="rerun jobs whose CSV exists")
    parser.add_argument("--write", help="the page whose simulated-scaling section report rewrites")
    args = parser.parse_args()
    if args.mode == "run":
        return run(args)
    import model

    return model.report(rows_of(args.out), args.out + ".csv", args.write)


if __name__ == "__main__":
    sys.exit(main())
