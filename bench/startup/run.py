"""Start-up at scale on this machine: time to init() and to the end of the
first allreduce at 2 ... 256 processes, through the store (chorus-run) and
through PMIx (Open MPI's mpirun), with UCX over shared memory and over TCP.
Writes a CSV and a plot:

    .venv/bin/python bench/startup/run.py [--build build] [--max-ranks 256] \
        [--out docs/startup.csv] [--plot docs/images/startup.png]

Each job runs bench/startup/startup_probe; rank 0 prints one JSON line
(init's slowest and median rank, the first allreduce, `ready`: first rank
in main() to last rank done, endpoints per rank). The processes share this
machine's cores, so past the core count the figures include waiting for a
core: compare the two bootstraps at equal counts, not the counts.
"""
import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import time

FIELDS = ["bootstrap", "network", "ranks", "init_max_s", "init_median_s", "first_allreduce_max_s", "ready_s",
          "launcher_wall_s", "endpoints_max",
          "endpoints_median"]


def launch(build, bootstrap, network, ranks, timeout):
    probe = os.path.join(build, "bench", "startup_probe")
    env = dict(os.environ, CHORUS_TIMEOUT="300s", CHORUS_PROGRESS="block")
    for name in ("CHORUS_ADDR", "CHORUS_RANK", "CHORUS_SIZE", "CHORUS_BOOTSTRAP", "UCX_TLS"):
        env.pop(name, None)
    if network == "tcp":
        env["UCX_TLS"] = "tcp,self"
    if bootstrap == "store":
        command = [os.path.join(build, "tools", "chorus-run"), "-n", str(ranks), "--timeout", f"{timeout}s", "--",
                   probe]
    else:
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        command = [shutil.which("mpirun.openmpi") or "mpirun", "--oversubscribe", "-n", str(ranks), "-x",
                   "CHORUS_TIMEOUT", "-x", "CHORUS_PROGRESS"] + (["-x", "UCX_TLS"] if network == "tcp" else []) + [
                      probe]
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout + 30)
    wall = time.monotonic() - started
    lines = [line.split("] ", 1)[-1] for line in done.stdout.splitlines() if '"ranks"' in line]
    if done.returncode != 0 or not lines:
        raise RuntimeError(f"{bootstrap}/{network} at {ranks}: exit {done.returncode}\n{done.stdout[-2000:]}\n"
                           f"{done.stderr[-2000:]}")
    row = json.loads(lines[0])
    row.update(bootstrap=bootstrap, network=network, launcher_wall_s=round(wall, 3))
    return row


def plot(rows, target):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for bootstrap, colour in (("store", "tab:blue"), ("pmix", "tab:orange")):
        for network, style in (("shm", "-"), ("tcp", "--")):
            chosen = sorted((r for r in rows if r["bootstrap"] == bootstrap and r["network"] == network),
                            key=lambda r: r["ranks"])
            if not chosen:
                continue
            label = f"{'store (chorus-run)' if bootstrap == 'store' else 'PMIx (mpirun)'}, UCX {network}"
            ranks = [r["ranks"] for r in chosen]
            axes[0].plot(ranks, [r["init_max_s"] for r in chosen], style, marker="o", color=colour, label=label)
            axes[1].plot(ranks, [r["ready_s"] for r in chosen], style, marker="o", color=colour, label=label)
    for axis, title in zip(axes, ("init(), slowest rank", "first rank in main() to last rank past its first allreduce")):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("processes (2 cores)")
        axis.set_ylabel("seconds")
        axis.set_title(title, fontsize=10)
        axis.grid(True, which="both", alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(target, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--max-ranks", type=int, default=256)
    parser.add_argument("--out", default="docs/startup.csv")
    parser.add_argument("--plot", default="docs/images/startup.png")
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--bootstraps", default="store,pmix")
    parser.add_argument("--networks", default="shm,tcp")
    args = parser.parse_args()
    rows = []
    ranks = 2
    counts = []
    while ranks <= args.max_ranks:
        counts.append(ranks)
        ranks *= 2
    for network in args.networks.split(","):
        for bootstrap in args.bootstraps.split(","):
            for count in counts:
                row = launch(args.build, bootstrap, network, count, args.timeout)
                print(json.dumps(row), flush=True)
                rows.append(row)
    with open(args.out, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    plot(rows, args.plot)


if __name__ == "__main__":
    sys.exit(main())
