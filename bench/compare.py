"""Reads bench/compare's raw runs; writes the CSV, the plot and the ratio tables.

Usage: compare.py RAW_DIR OUT_DIR
Raw files are named TOOL-ALGO-nRANKS-rROUND.txt:
  chorus-*   chorus-perf rows: size count type op algo, then the out-of-place
             and the in-place columns (time, min-max, algbw, busbw, #wrong);
  memory-bound  bench/memory_bound rows: size, test name, GB/s, ratio;
  ucx-*      "size GB/s";
  any other  a peer's rows: chorus-perf's layout with the in-place columns only.
The best (lowest time) of the rounds is kept per (tool, algo, ranks, size).
"""
import csv
import pathlib
import re
import sys


def measured_rows(text):
    """The data rows of a chorus-perf (or peer) output, as lists of fields:
    rank prefixes ("[0] "), comment lines and a library's own chatter dropped."""
    for line in text.splitlines():
        fields = re.sub(r"^\[\d+\]\s*", "", line).split()
        if fields and fields[0].isdigit():
            yield fields


def allreduce_busbw(size, ranks, time_us):
    """busbw from the time, not the printed (rounded) column: 2(n-1)/n * size / time."""
    return 2 * (ranks - 1) / ranks * size / (time_us * 1e-6) / 1e9


# chorus-perf prints out of place first (time at column 5), in place second;
# the peers print the in-place columns only (time at column 5).
CHORUS_PERF_OUT_OF_PLACE_US = 5
CHORUS_PERF_IN_PLACE_US = 10
ALGORITHM_COLUMN = 4

# The memory traffic of an allreduce of S bytes on each of n ranks of one
# host: each rank reads its input and writes its output, 2 S, and nothing
# less will do. It is also the part of the shared-memory algorithms' cost
# models (include/chorus/collective/allreduce_shared_memory*.hpp) that
# reaches memory once the buffers outgrow the caches: their slots (1 MiB a
# rank) stay cached, so the peers' slices come from the caches. The bound is
# the time of that traffic at the fastest rate bench/memory_bound saw at
# that size with n threads (copy, or a reduction kernel).
def memory_traffic_per_rank(size):
    return 2 * size


PEERS = [  # (tool, label) in the tables' order; Gloo's best algorithm per size
    ("oneccl", "oneCCL"),
    ("deepspeed", "DeepSpeed shm"),
    ("impi", "Intel MPI"),
    ("mpich", "MPICH"),
    ("openmpi", "Open MPI"),
    ("gloo", "Gloo (Debian)"),
    ("torch", "torch Gloo"),
]


def rows_of(path):
    """(tool, algo, ranks, size, time_us, ran) per measured row; ran is the
    algorithm chorus-perf reports for the size (None for the others)."""
    tool, algo, ranks, _ = re.match(r"(\w+)-(\w+)-n(\d+)-r(\d+)\.txt", path.name).groups()
    ranks = int(ranks)
    for fields in measured_rows(path.read_text()):
        if tool == "ucx":
            size, gbps = int(fields[0]), float(fields[1])
            yield tool, algo, ranks, size, size / (gbps * 1e9) * 1e6 if gbps > 0 else float("inf"), None
        elif tool == "memory":
            pass  # read by ceilings()
        elif tool == "chorus":
            size, ran = int(fields[0]), fields[ALGORITHM_COLUMN]
            yield tool, algo, ranks, size, float(fields[CHORUS_PERF_IN_PLACE_US]), ran
            if algo == "auto":
                yield tool, "auto_out", ranks, size, float(fields[CHORUS_PERF_OUT_OF_PLACE_US]), ran
        else:
            yield tool, algo, ranks, int(fields[0]), float(fields[5]), None


def ceilings(raw):
    """{(ranks, size): GB/s}: the most traffic per second any of memory_bound's
    tests moved at that size with that many threads, the best of the rounds."""
    best = {}
    for path in raw.glob("memory-bound-n*-r*.txt"):
        ranks = int(re.search(r"-n(\d+)-", path.name).group(1))
        for fields in measured_rows(path.read_text()):
            key = (ranks, int(fields[0]))
            best[key] = max(best.get(key, 0.0), float(fields[-2]))
    return best


def bound_us(size, ranks, ceiling_gbps):
    """The time every rank's memory traffic takes at the ceiling's rate, all
    ranks sharing the machine's bandwidth at once."""
    if not ceiling_gbps:
        return None
    return ranks * memory_traffic_per_rank(size) / (ceiling_gbps * 1e9) * 1e6


def collect(raw):
    best, ran_at = {}, {}
    for path in sorted(raw.glob("*.txt")):
        for tool, algo, ranks, size, time_us, ran in rows_of(path):
            key = (tool, algo, ranks, size)
            if key not in best or time_us < best[key]:
                best[key] = time_us
            if ran and algo == "auto":
                ran_at[(ranks, size)] = ran
    return best, ran_at


def fastest_of(best, tool, ranks, size):
    times = [t for (to, _, r, s), t in best.items() if to == tool and r == ranks and s == size]
    return min(times) if times else None


def tables(best, ran_at, bounds):
    lines = ["Each cell: the time of one allreduce (us) and, in brackets, how many times",
             "faster chorus (auto, in place) is. bound: every rank reading its input and writing",
             "its output (2 S) at the fastest rate bench/memory_bound saw at that size with as",
             "many threads as ranks; of bound: bound / chorus's time, in place and out of place",
             "(1.0 = at the bound)."]
    for ranks in sorted({key[2] for key in best}):
        lines.append(f"\n### {ranks} ranks\n")
        labels = [label for tool, label in PEERS if any(k[0] == tool and k[2] == ranks for k in best)]
        lines.append("| size | algorithm | chorus in place | out of place | " + " | ".join(labels) + " | bound | of bound, in / out of place |")
        lines.append("|---" * (6 + len(labels)) + "|")
        sizes = sorted(s for (t, a, r, s) in best if t == "chorus" and a == "auto" and r == ranks)
        for size in sizes:
            chorus = best[("chorus", "auto", ranks, size)]
            cells = [human(size), ran_at.get((ranks, size), "-"), f"{chorus:.1f}"]
            outside = best.get(("chorus", "auto_out", ranks, size))
            cells.append(f"{outside:.1f} ({outside / chorus:.2f} of in place)" if outside else "-")
            for tool, label in PEERS:
                if label not in labels:
                    continue
                peer = fastest_of(best, tool, ranks, size)
                cells.append(f"{peer:.1f} ({peer / chorus:.2f}x)" if peer else "-")
            bound = bounds.get((ranks, size))
            of_bound = f"{bound / chorus:.2f}" + (f" / {bound / outside:.2f}" if outside else "") if bound else "-"
            cells += [f"{bound:.1f}" if bound else "-", of_bound]
            lines.append("| " + " | ".join(cells) + " |")
    return lines


def human(size):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift} {unit}iB"
    return f"{size} B"


def main(raw_dir, out_dir):
    raw, out = pathlib.Path(raw_dir), pathlib.Path(out_dir)
    best, ran_at = collect(raw)
    ceiling = ceilings(raw)
    bounds = {}  # (ranks, size): us, at the sizes chorus ran
    for ranks, size in ran_at:
        bound = bound_us(size, ranks, ceiling.get((ranks, size)))
        if bound:
            bounds[(ranks, size)] = bound
    with open(out / "allreduce.csv", "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["tool", "algo", "ranks", "size_bytes", "time_us", "busbw_GBps"])
        for (tool, algo, ranks, size), time_us in sorted(best.items()):
            writer.writerow([tool, algo, ranks, size, f"{time_us:.2f}", f"{allreduce_busbw(size, ranks, time_us):.4f}"])
        for (ranks, size), bound in sorted(bounds.items()):
            writer.writerow(["bound", ran_at[(ranks, size)], ranks, size, f"{bound:.2f}",
                             f"{allreduce_busbw(size, ranks, bound):.4f}"])
    lines = tables(best, ran_at, bounds)
    (out / "ratios.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    series = {}
    for (tool, algo, ranks, size), time_us in best.items():
        series.setdefault((tool, algo, ranks), {})[size] = time_us
    for (ranks, size), bound in bounds.items():
        series.setdefault(("bound", "memory", ranks), {})[size] = bound
    plot(series, sorted({key[2] for key in series}), out / "allreduce.png")


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
            mine = tool == "chorus" and algo in ("auto", "auto_out")
            style = "-" if mine else "-." if tool == "bound" else "--" if tool == "chorus" else ":"
            width = 2.5 if mine else 1.2
            label = f"{tool} {algo}"
            bandwidth.plot(sizes, [allreduce_busbw(s, ranks, points[s]) for s in sizes], style, linewidth=width, label=label)
            small = [s for s in sizes if s <= 65536]
            if tool not in ("ucx", "bound"):
                latency.plot(small, [points[s] for s in small], style, linewidth=width, label=label)
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
