"""Plots the CSVs of run_schemes: test accuracy against wall time and
against bytes sent (rank 0), one line per scheme and codec; prints a
Markdown table of the final accuracy, wall time and bytes per run."""
import csv
import pathlib
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

directory, image = pathlib.Path(sys.argv[1]), sys.argv[2]
runs = []
for path in sorted(directory.glob("*.csv")):
    rows = list(csv.DictReader(path.open()))
    if rows:
        runs.append(rows)

figure, (by_time, by_bytes) = plt.subplots(1, 2, figsize=(13, 5))
for rows in runs:
    epochs = [r for r in rows if r["epoch"] != "final"]
    label = f'{rows[0]["scheme"]} ({rows[0]["codec"]})'
    style = "-" if rows[0]["codec"] == "none" else "--"
    accuracy = [float(r["test_accuracy"]) for r in epochs]
    by_time.plot([float(r["wall_s"]) for r in epochs], accuracy, style, marker="o", markersize=3, label=label)
    by_bytes.plot([int(r["bytes_sent_rank0"]) / 1e9 for r in epochs], accuracy, style, marker="o", markersize=3, label=label)
for axis, name in ((by_time, "wall time (s)"), (by_bytes, "bytes sent by rank 0 (GB)")):
    axis.set_xlabel(name)
    axis.set_ylabel("test accuracy")
    axis.set_ylim(0.80, 0.91)
    axis.axhline(0.88, color="grey", linewidth=0.8)
    axis.grid(alpha=0.3)
by_bytes.set_xscale("log")
by_time.legend(fontsize=7)
figure.suptitle(f'Fashion-MNIST MLP 784-256-128-10, {runs[0][0]["ranks"] if runs else "?"} ranks')
figure.tight_layout()
figure.savefig(image, dpi=110)

print("| scheme | codec | final test accuracy | wall (s) | sent by rank 0 (MB) |")
print("|---|---|---|---|---|")
for rows in runs:
    final = rows[-1]
    print(f'| {final["scheme"]} | {final["codec"]} | {float(final["test_accuracy"]):.4f} | '
          f'{float(final["wall_s"]):.1f} | {int(final["bytes_sent_rank0"]) / 1e6:.1f} |')
