"""Summary and plot of run_heterogeneous: DIR/CONDITION/SCHEME.{csv,log}.

    plot_heterogeneous.py DIR OUT.png > summary.md

Per condition, a table: wall time to reach 0.85 and 0.88 test accuracy
(interpolated between the per-epoch evaluations of rank 0's model; "-" when
never reached), final accuracy (the model kept after finish()), wall time,
MB rank 0 sent, the slowest and fastest rank's samples/s, and the servers'
mean staleness; and a panel per condition of accuracy against wall time.
"""

from __future__ import annotations

import csv
import re
import sys
from pathlib import Path

CONDITIONS = {
    "equal": "all equal",
    "slow2": "rank 3 2x slower",
    "slow4": "rank 3 4x slower",
    "slow4job": "rank 3 4x slower, epochs by the job's samples",
    "jitter": "Pareto jitter (1 ms, 1.5)",
    "link100": "rank 3 behind 100 Mbit/s (others 1 Gbit/s)",
    "leave": "rank 3 leaves at mid-training",
    "join": "a fifth worker joins at mid-training (rank 3 leaves where it can)",
}
THRESHOLDS = (0.85, 0.88)


def read_run(csv_path: Path) -> dict:
    rows = list(csv.DictReader(open(csv_path)))
    epochs = [r for r in rows if r["epoch"] != "final"]
    final = [r for r in rows if r["epoch"] == "final"]
    log = csv_path.with_suffix(".log").read_text(errors="replace") if csv_path.with_suffix(".log").exists() else ""
    paces = [float(m) for m in re.findall(r"samples in [\d.]+ s, (\d+) samples/s", log)]
    staleness = re.search(r"staleness mean ([\d.]+)", log)
    return {
        "wall": [float(r["wall_s"]) for r in epochs],
        "accuracy": [float(r["test_accuracy"]) for r in epochs],
        "final": float(final[0]["test_accuracy"]) if final else float("nan"),
        "total_wall": float(final[0]["wall_s"]) if final else (float(epochs[-1]["wall_s"]) if epochs else 0.0),
        "mb": int((final or epochs)[-1]["bytes_sent_rank0"]) / 1e6 if rows else 0.0,
        "paces": paces,
        "staleness": float(staleness.group(1)) if staleness else None,
    }


def time_to(run: dict, threshold: float):
    """Wall time at which rank 0's model first reaches `threshold`, interpolated linearly between evaluations
    (the start counts as accuracy 0.1 at time 0)."""
    previous_time, previous_accuracy = 0.0, 0.1
    for time, accuracy in zip(run["wall"], run["accuracy"]):
        if accuracy >= threshold:
            share = (threshold - previous_accuracy) / max(accuracy - previous_accuracy, 1e-12)
            return previous_time + share * (time - previous_time)
        previous_time, previous_accuracy = time, accuracy
    return None


def seconds(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def read_runs(root: Path, conditions: dict, read=read_run) -> dict:
    """{condition: {scheme: run}} for each condition with a folder under root, a run per CSV read by `read`."""
    return {condition: {p.stem: read(p) for p in sorted((root / condition).glob("*.csv"))}
            for condition in conditions if (root / condition).is_dir()}


def plot_panels(runs: dict, titles: dict, picture: Path, log_time: bool = False) -> None:
    """A panel per condition of rank 0's test accuracy against wall time, one colour per scheme in every
    panel, whichever schemes a condition runs."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no matplotlib: no plot)", file=sys.stderr)
        return
    count = max(len(runs), 1)
    columns = min(count, 3)
    rows = (count + columns - 1) // columns
    figure, axes = plt.subplots(rows, columns, figsize=(5.5 * columns, 4 * rows), squeeze=False)
    schemes = sorted({scheme for by_scheme in runs.values() for scheme in by_scheme})
    palette = plt.get_cmap("tab10")
    colour = {scheme: palette(k % 10) for k, scheme in enumerate(schemes)}
    for panel, (condition, by_scheme) in zip(axes.flat, runs.items()):
        for scheme, run in by_scheme.items():
            panel.plot(run["wall"], run["accuracy"], marker=".", label=scheme, color=colour[scheme])
        for threshold in THRESHOLDS:
            panel.axhline(threshold, color="grey", linewidth=0.5, linestyle=":")
        panel.set_title(titles[condition], fontsize=10)
        if log_time:
            panel.set_xscale("log")
        panel.set_xlabel("wall time (s, log)" if log_time else "wall time (s)")
        panel.set_ylabel("test accuracy (rank 0's model)")
        panel.set_ylim(0.80, 0.90)
        panel.legend(fontsize=7)
    for panel in list(axes.flat)[len(runs):]:
        panel.axis("off")
    figure.tight_layout()
    figure.savefig(picture, dpi=110)


def main() -> None:
    root, picture = Path(sys.argv[1]), Path(sys.argv[2])
    runs = read_runs(root, CONDITIONS)
    print("# Heterogeneous training: Fashion-MNIST MLP, 4 ranks\n")
    for condition, by_scheme in runs.items():
        print(f"## {CONDITIONS[condition]} ({condition})\n")
        print("| scheme | to 0.85 (s) | to 0.88 (s) | final accuracy | wall (s) | MB sent (rank 0) | samples/s "
              "slowest / fastest rank | staleness (mean) |")
        print("|---|---|---|---|---|---|---|---|")
        for scheme, run in by_scheme.items():
            paces = run["paces"]
            pace = f"{min(paces):.0f} / {max(paces):.0f}" if paces else "-"
            stale = f"{run['staleness']:.2f}" if run["staleness"] is not None else "-"
            print(f"| {scheme} | {seconds(time_to(run, 0.85))} | {seconds(time_to(run, 0.88))} | {run['final']:.4f} | "
                  f"{run['total_wall']:.1f} | {run['mb']:.1f} | {pace} | {stale} |")
        print()
    plot_panels(runs, CONDITIONS, picture)


if __name__ == "__main__":
    main()
