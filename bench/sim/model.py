"""What bench/sim/scale.py's simulated points predict past them.

Each algorithm's time at a size is fitted, by least squares over the rank
counts simulated on one platform, to the form its cost formula has in the
rank count n (alpha: a message's latency, beta: a byte's time on a NIC,
p: ranks per host):

    ring                t = c0 + c1 n        2 (n - 1) alpha + 2 m beta
    every other one     t = c0 + c1 log2 n   recursive doubling: log2 n alpha + log2(n / p) p m beta;
                                             Rabenseifner: 2 log2 n alpha + 2 p m beta;
                                             tree: 2 log2 n (alpha + m beta); hierarchical:
                                             the same between hosts, over n / p ranks

Each fit takes the two largest counts simulated (the regime the
prediction is for: on the fat tree from 1,024 ranks on, 4 leaf switches
or more, every cross-host message crosses the spine). It is checked by
fitting the two counts below the largest and predicting the largest; the
table then carries the fit out to 65,536 ranks, each predicted figure
marked as the model's.
"""
import contextlib
import csv
import io
import math
from collections import defaultdict

TARGETS = [1024, 4096, 16384, 65536]


def feature(algorithm, ranks):
    return float(ranks) if algorithm == "ring" else math.log2(ranks)


def fit(points, algorithm):
    """t = c0 + c1 x through the two largest of the (ranks, seconds) points."""
    points = points[-2:]
    xs = [feature(algorithm, n) for n, _ in points]
    ys = [t for _, t in points]
    count = len(xs)
    mean_x, mean_y = sum(xs) / count, sum(ys) / count
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys)) / spread if spread else 0.0
    return lambda n: mean_y + slope * (feature(algorithm, n) - mean_x)


def series(rows):
    """(platform, per_host, algorithm, bytes) -> sorted [(ranks, us)]; and the registry's choice.

    A job that did not run an algorithm by name but chose it (auto) gives
    that algorithm's time: it is the same call."""
    points = defaultdict(dict)
    chosen = {}
    for row in rows:
        key = (row["platform"], int(row["per_host"]), row["algorithm"], row["bytes"])
        points[key][row["ranks"]] = row["simulated_us"]
        if row["algorithm"] == "auto":
            chosen[(row["platform"], row["ranks"], row["bytes"])] = row["chosen"]
    for row in rows:
        if row["algorithm"] == "auto":
            named = points[(row["platform"], int(row["per_host"]), row["chosen"], row["bytes"])]
            named.setdefault(row["ranks"], row["simulated_us"])
    return {key: sorted(by_ranks.items()) for key, by_ranks in points.items()}, chosen


def size_name(bytes_):
    return f"{bytes_ // 1048576} MiB" if bytes_ >= 1048576 else f"{bytes_ // 1024} KiB"


BEGIN, END = "<!-- simulated scaling: bench/sim/scale.py report writes this -->", "<!-- end of simulated scaling -->"


def report(rows, target, page=None):
    """Writes the rows to `target`, prints the tables, and puts them in
    `page` (a markdown file) between BEGIN and END where given."""
    text = io.StringIO()
    with contextlib.redirect_stdout(text):
        tables(rows, target)
    print(text.getvalue(), end="")
    if page:
        with open(page) as source:
            content = source.read()
        if BEGIN not in content or END not in content:
            raise SystemExit(f"{page} has no '{BEGIN}' ... '{END}' section")
        head, rest = content.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        with open(page, "w") as out:
            out.write(head + BEGIN + "\n\n" + text.getvalue().strip() + "\n\n" + END + tail)
    return 0


def tables(rows, target):
    rows.sort(key=lambda r: (r["platform"], r["ranks"], r["bytes"], r["algorithm"]))
    with open(target, "w", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=["platform", "ranks", "per_host", "algorithm", "bytes",
                                                 "simulated_us", "chosen"])
        writer.writeheader()
        writer.writerows(rows)
    points, chosen = series(rows)
    algorithms = ["ring", "recursive_doubling", "rabenseifner", "tree", "hierarchical"]

    print("#### The fit, checked: the largest count left out and predicted\n")
    print("| platform | algorithm | size | fitted on | predicted | simulated | error |")
    print("|---|---|---|---|---|---|---|")
    errors = []
    for (platform, per_host, algorithm, bytes_), known in sorted(points.items()):
        if algorithm == "auto" or len(known) < 3:
            continue
        model = fit(known[:-1], algorithm)
        largest, simulated = known[-1]
        predicted = model(largest)
        errors.append(abs(predicted - simulated) / simulated)
        print(f"| {platform} | {algorithm} | {size_name(bytes_)} | {', '.join(str(n) for n, _ in known[:-1][-2:])} | "
              f"{predicted / 1000:.2f} ms at {largest} | {simulated / 1000:.2f} ms | "
              f"{100 * (predicted - simulated) / simulated:+.0f}% |")
    if errors:
        print(f"\nMean |error| {100 * sum(errors) / len(errors):.0f}%, worst {100 * max(errors):.0f}% "
              f"({len(errors)} extrapolations).\n")

    print("#### Allreduce on the fat tree, 8 ranks per host (ms; * the model's)\n")
    sizes = sorted({key[3] for key in points if key[0] == "fat-tree"})
    print("| ranks | size | " + " | ".join(algorithms) + " | fastest | registry's choice |")
    print("|---|---|" + "---|" * len(algorithms) + "---|---|")
    for ranks in sorted({n for key, known in points.items() if key[0] == "fat-tree" for n, _ in known} | set(TARGETS)):
        for bytes_ in sizes:
            cells, best = [], None
            for algorithm in algorithms:
                known = dict(points.get(("fat-tree", 8, algorithm, bytes_), []))
                if ranks in known:
                    value, mark = known[ranks], ""
                elif len(known) >= 2 and ranks > max(known):
                    value, mark = fit(sorted(known.items()), algorithm)(ranks), "*"
                else:
                    cells.append("")
                    continue
                cells.append(f"{value / 1000:.2f}{mark}")
                if best is None or value < best[1]:
                    best = (algorithm, value)
            if best is None:
                continue
            registry = chosen.get(("fat-tree", ranks, bytes_))
            if registry is None:  # the defaults do not change with the rank count past 3: the largest simulated's
                simulated = [n for (p, n, b) in chosen if p == "fat-tree" and b == bytes_ and n < ranks]
                registry = chosen[("fat-tree", max(simulated), bytes_)] + "*" if simulated else ""
            print(f"| {ranks} | {size_name(bytes_)} | " + " | ".join(cells) + f" | {best[0]} | {registry} |")

    others = sorted({(key[0], key[1]) for key in points if key[0] != "fat-tree"})
    for platform, per_host in others:
        print(f"\n#### {platform}, {per_host} ranks per host (ms, simulated)\n")
        print("| ranks | size | " + " | ".join(algorithms) + " | fastest | registry's choice |")
        print("|---|---|" + "---|" * len(algorithms) + "---|---|")
        mine = {key: known for key, known in points.items() if key[:2] == (platform, per_host)}
        for ranks in sorted({n for known in mine.values() for n, _ in known}):
            for bytes_ in sorted({key[3] for key in mine}):
                cells, best = [], None
                for algorithm in algorithms:
                    known = dict(mine.get((platform, per_host, algorithm, bytes_), []))
                    if ranks not in known:
                        cells.append("")
                        continue
                    cells.append(f"{known[ranks] / 1000:.2f}")
                    if best is None or known[ranks] < best[1]:
                        best = (algorithm, known[ranks])
                if best:
                    print(f"| {ranks} | {size_name(bytes_)} | " + " | ".join(cells) + f" | {best[0]} | "
                          f"{chosen.get((platform, ranks, bytes_), '')} |")
