"""Plots the runs of run_schemes and prints their summary table.

    plot_schemes.py SHM_DIR IMAGE [SHAPED_DIR SHAPED_IMAGE RATE]

Each directory holds one CSV per run (rank 0's test accuracy per epoch) and
its log (the trainer's output: the parameter server's staleness line and
any lost rank). IMAGE: test accuracy against wall time and against bytes
sent, one line per scheme and codec, on shared memory; SHAPED_IMAGE:
accuracy against wall time with each rank a host behind a RATE link.
Prints a Markdown table per network: final accuracy, wall time, bytes,
staleness statistics and lost ranks."""
import csv
import pathlib
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

plt.rcParams["axes.prop_cycle"] = plt.cycler(color=plt.get_cmap("tab20").colors)  # a colour per run

SERVER = re.compile(r"staleness mean ([\d.]+) max (\d+), largest clock gap served (\d+); rank 0 waited ([\d.]+) s")
LOST = re.compile(r"lost rank (\d+): noticed at step (\d+), ([\d.]+) s in")


def load(directory):
    runs = []
    for path in sorted(pathlib.Path(directory).glob("*.csv")):
        rows = list(csv.DictReader(path.open()))
        if not rows:
            continue
        log = path.with_suffix(".log")
        text = log.read_text() if log.exists() else ""
        runs.append({"name": path.stem, "rows": rows, "server": SERVER.search(text), "lost": LOST.findall(text)})
    return runs


def label(run):
    first = run["rows"][0]
    killed = " (a rank killed)" if "killed" in run["name"] else ""
    return f'{first["scheme"]} ({first["codec"]}){killed}'


def curve(axis, run, x_of):
    epochs = [r for r in run["rows"] if r["epoch"] != "final"]
    style = "-" if run["rows"][0]["codec"] == "none" else "--"
    axis.plot([x_of(r) for r in epochs], [float(r["test_accuracy"]) for r in epochs], style, marker="o",
              markersize=3, label=label(run))


def dress(axis, xlabel):
    axis.set_xlabel(xlabel)
    axis.set_ylabel("test accuracy")
    axis.set_ylim(0.80, 0.91)
    axis.axhline(0.88, color="grey", linewidth=0.8)
    axis.grid(alpha=0.3)


def table(runs, network):
    print(f"\n{network}\n")
    print("| scheme | codec | final test accuracy | wall (s) | sent by rank 0 (MB) | staleness mean / max | clock gap max | lost |")
    print("|---|---|---|---|---|---|---|---|")
    for run in runs:
        final = run["rows"][-1]
        server = run["server"]
        stale = f"{float(server.group(1)):.2f} / {server.group(2)}" if server else ""
        gap = server.group(3) if server else ""
        lost = ", ".join(f"rank {rank} at step {step} ({float(seconds):.0f} s)" for rank, step, seconds in run["lost"])
        print(f'| {label(run)} | {final["codec"]} | {float(final["test_accuracy"]):.4f} | {float(final["wall_s"]):.1f} | '
              f'{int(final["bytes_sent_rank0"]) / 1e6:.1f} | {stale} | {gap} | {lost} |')


WALL = ("wall time (s)", lambda r: float(r["wall_s"]))
BYTES = ("bytes sent by rank 0 (GB)", lambda r: int(r["bytes_sent_rank0"]) / 1e9)


def plot(runs, panels, title, image):
    """A panel per (axis, log scale), a line per run in each; the legend in the first."""
    figure, axes = plt.subplots(1, len(panels), figsize=(13, 5) if len(panels) > 1 else (8, 5), squeeze=False)
    for axis, ((xlabel, x_of), log) in zip(axes[0], panels):
        for run in runs:
            curve(axis, run, x_of)
        dress(axis, xlabel)
        if log:
            axis.set_xscale("log")
    axes[0][0].legend(fontsize=7)
    figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(image, dpi=110)


shm = load(sys.argv[1])
ranks = shm[0]["rows"][0]["ranks"] if shm else "?"
plot(shm, [(WALL, False), (BYTES, True)], f"Fashion-MNIST MLP 784-256-128-10, {ranks} ranks on shared memory",
     sys.argv[2])
table(shm, "Shared memory (one host)")

if len(sys.argv) > 5:
    shaped, rate = load(sys.argv[3]), sys.argv[5]
    plot(shaped, [(WALL, True)], f"Fashion-MNIST MLP, {ranks} ranks, each a host behind a {rate} link (UCX over TCP)",
         sys.argv[4])
    table(shaped, f"Each rank a host behind a {rate} link")
