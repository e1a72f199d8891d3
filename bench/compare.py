"""Reads bench/compare's raw runs; writes the CSV, the plot and the ratio table.

Usage: compare.py RAW_DIR OUT_DIR
Raw files are named TOOL-ALGO-nRANKS-rROUND.txt. chorus-perf rows give the
in-place columns; peer rows the same layout with one set of columns; ucx rows
are "size GB/s". The best (lowest time / highest bandwidth) of the rounds is
kept per (tool, algo, ranks, size).
"""
import csv
import pathlib
import re
import sys


def measured_rows(text):
    """The data rows of a chorus-perf (or peer) output, as lists of fields:
    rank prefixes ("[0] ") and comment lines dropped."""
    for line in text.splitlines():
        line = re.sub(r"^\[\d+\]\s*", "", line).strip()
        if line and not line.startswith("#"):
            yield line.split()


def allreduce_busbw(size, ranks, time_us):
    """busbw from the time, not the printed (rounded) column: 2(n-1)/n * size / time."""
    return 2 * (ranks - 1) / ranks * size / (time_us * 1e-6) / 1e9


# chorus-perf's in-place time is its column 10; the peers print theirs at 5.
CHORUS_PERF_IN_PLACE_US = 10


def rows_of(path):
    tool, algo, ranks, _ = re.match(r"(\w+)-(\w+)-n(\d+)-r(\d+)\.txt", path.name).groups()
    for fields in measured_rows(path.read_text()):
        if tool == "ucx":
            size, gbps = int(fields[0]), float(fields[1])
            yield tool, algo, int(ranks), size, size / (gbps * 1e9) * 1e6 if gbps > 0 else float("inf"), gbps
        else:
            size, time_us = int(fields[0]), float(fields[CHORUS_PERF_IN_PLACE_US if tool == "chorus" else 5])
            yield tool, algo, int(ranks), size, time_us, allreduce_busbw(size, int(ranks), time_us)


def main(raw_dir, out_dir):
    raw, out = pathlib.Path(raw_dir), pathlib.Path(out_dir)
    best = {}
    for path in sorted(raw.glob("*.txt")):
        for tool, algo, ranks, size, time_us, busbw in rows_of(path):
            key = (tool, algo, ranks, size)
            if key not in best or time_us < best[key][0]:
                best[key] = (time_us, busbw)
    with open(out / "allreduce.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["tool", "algo", "ranks", "size_bytes", "time_us", "busbw_GBps"])
        for (tool, algo, ranks, size), (time_us, busbw) in sorted(best.items()):
            writer.writerow([tool, algo, ranks, size, f"{time_us:.2f}", f"{busbw:.4f}"])
    series = {}
    for (tool, algo, ranks, size), value in best.items():
        series.setdefault((tool, algo, ranks), {})[size] = value
    rank_counts = sorted({key[2] for key in series})
    lines = []
    for ranks in rank_counts:
        chorus = series.get(("chorus", "auto", ranks), {})
        mpi = series.get(("mpi", "default", ranks), {})
        gloo = [v for (t, a, r), v in series.items() if t == "gloo" and r == ranks]
        ucx = series.get(("ucx", "tag_bw", ranks), {})
        lines.append(f"\n### {ranks} ranks: busbw (GB/s) and chorus/peer ratios\n")
        network = [v for (t, a, r), v in series.items() if t == "chorus" and r == ranks and a in ("ring", "rd", "rabenseifner", "tree")]
        header = "| size (B) | chorus auto | best network algorithm | auto/network | Open MPI | ratio | best Gloo | ratio |"
        rule = "|---|---|---|---|---|---|---|---|"
        if ucx:
            header += " ucx_perftest | chorus/ucx |"
            rule += "---|---|"
        lines += [header, rule]
        for size in sorted(chorus):
            c = chorus[size][1]
            m = mpi.get(size, (None, None))[1]
            g = max((s.get(size, (0, 0))[1] for s in gloo), default=None)
            ratio = lambda a, b: f"{a / b:.2f}" if a and b else "-"
            w = max((s.get(size, (0, 0))[1] for s in network), default=None)
            row = f"| {size} | {c:.4g} | {w if w is None else f'{w:.4g}'} | {ratio(c, w)} | {m if m is None else f'{m:.4g}'} | {ratio(c, m)} | " \
                  f"{g if g is None else f'{g:.4g}'} | {ratio(c, g)} |"
            if ucx:
                u = ucx.get(size, (None, None))[1]
                row += f" {u if u is None else f'{u:.4g}'} | {ratio(c, u)} |"
            lines.append(row)
    (out / "ratios.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(series, rank_counts, out / "allreduce.png")


def plot(series, rank_counts, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    figure, axes = plt.subplots(2, len(rank_counts), figsize=(7 * len(rank_counts), 10), squeeze=False)
    for column, ranks in enumerate(rank_counts):
        bandwidth, latency = axes[0][column], axes[1][column]
        for (tool, algo, r), points in sorted(series.items()):
            if r != ranks:
                continue
            sizes = sorted(points)
            label = f"{tool} {algo}"
            style = "-" if tool == "chorus" and algo == "auto" else "--" if tool == "chorus" else ":"
            width = 2.5 if tool == "chorus" and algo == "auto" else 1.2
            bandwidth.plot(sizes, [max(points[s][1], 1e-6) for s in sizes], style, linewidth=width, label=label)
            small = [s for s in sizes if s <= 65536]
            if tool != "ucx":
                latency.plot(small, [points[s][0] for s in small], style, linewidth=width, label=label)
        bandwidth.set(xscale="log", yscale="log", xlabel="size (bytes)", ylabel="busbw (GB/s)",
                      title=f"allreduce busbw, {ranks} ranks")
        latency.set(xscale="log", yscale="log", xlabel="size (bytes)", ylabel="time (us)",
                    title=f"allreduce time, small messages, {ranks} ranks")
        for axis in (bandwidth, latency):
            axis.grid(True, which="both", alpha=0.3)
            axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


if __name__ == "__main__":
    main(*sys.argv[1:3])
