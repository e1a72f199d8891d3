"""Summary and plot of run_slow_links: DIR/CONDITION/SCHEME.{csv,log,wire}.

    plot_slow_links.py DIR OUT.png > summary.md

Per condition, a table: wall time to 0.85 and 0.88 test accuracy (rank 0's
model, interpolated between epochs), the final accuracy (the model kept
after finish(), or the last epoch's where the run hit its cap), the MB all
hosts' wires sent, how many times fewer than allreduce-SGD's at 1 Gbit/s,
the MB rank 0's scheme sent, and each rank's utilisation (its computing
over its wall time); and a panel per condition of accuracy against time.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from plot_heterogeneous import THRESHOLDS, plot_panels, read_run, read_runs, seconds, time_to

CONDITIONS = {
    "1gbit": "every link 1 Gbit/s",
    "100mbit": "every link 100 Mbit/s",
    "10mbit": "every link 10 Mbit/s",
    "slow4": "1 Gbit/s, rank 3 4x slower (rounds by the job's samples)",
    "churn": "1 Gbit/s, rank 3 killed at mid-training, a fifth worker joins",
}

def read(csv_path: Path) -> dict:
    run = read_run(csv_path)
    log = csv_path.with_suffix(".log").read_text(errors="replace") if csv_path.with_suffix(".log").exists() else ""
    wire = csv_path.with_suffix(".wire")
    run["wire_mb"] = int(wire.read_text().strip() or 0) / 1e6 if wire.exists() else None
    run["utilisation"] = [float(u) for u in re.findall(r"\(utilisation ([\d.]+)\)", log)]
    run["capped"] = run["final"] != run["final"]  # NaN: no final row, the cap stopped it
    if run["capped"] and run["accuracy"]:
        run["final"] = run["accuracy"][-1]
    return run


def main() -> None:
    root, picture = Path(sys.argv[1]), Path(sys.argv[2])
    runs = read_runs(root, CONDITIONS, read)
    baseline = runs.get("1gbit", {}).get("allreduce", {}).get("wire_mb")
    print("# Training across slow links: Fashion-MNIST MLP, 4 ranks, a host each\n")
    for condition, by_scheme in runs.items():
        print(f"## {CONDITIONS[condition]} ({condition})\n")
        print("| scheme | to 0.85 (s) | to 0.88 (s) | final accuracy | MB on the wire | x fewer than allreduce "
              "at 1 Gbit/s | MB rank 0 sent | utilisation per rank |")
        print("|---|---|---|---|---|---|---|---|")
        for scheme, run in by_scheme.items():
            wire = run["wire_mb"]
            fewer = f"{baseline / wire:.0f}" if baseline and wire else "-"
            final = "-" if run["final"] != run["final"] else f"{run['final']:.4f}"
            final += " (capped)" if run["capped"] else ""
            use = " / ".join(f"{u:.2f}" for u in run["utilisation"]) or "-"
            print(f"| {scheme} | {seconds(time_to(run, THRESHOLDS[0]))} | {seconds(time_to(run, THRESHOLDS[1]))} | "
                  f"{final} | {'-' if wire is None else f'{wire:.1f}'} | {fewer} | {run['mb']:.1f} | {use} |")
        print()
    plot_panels(runs, CONDITIONS, picture, log_time=True)


if __name__ == "__main__":
    main()
