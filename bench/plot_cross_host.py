"""Plots bench/cross_host's results.csv: allreduce time per size for each
library, one panel per (layout, link), with the time the inter-host bytes
need at the link rate.

    /usr/bin/python3 bench/plot_cross_host.py bench/results/cross_host/results.csv docs/cross_host.png
"""
import collections
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RATES = {"10gbit": 10e9, "1gbit": 1e9}


def main(source, target):
    panels = collections.defaultdict(lambda: collections.defaultdict(dict))
    for row in csv.DictReader(open(source)):
        panels[(row["layout"], row["rate"])][row["library"]][int(row["size_bytes"])] = float(row["time_us"]) / 1e3
    keys = sorted(panels, key=lambda k: (k[0], list(RATES).index(k[1]) + 1 if k[1] in RATES else 0))
    columns = len({rate for _, rate in keys})
    rows = len({layout for layout, _ in keys})
    figure, axes = plt.subplots(rows, columns, figsize=(5.5 * columns, 4.5 * rows), squeeze=False)
    layouts = sorted({layout for layout, _ in keys})
    rates = [rate for rate in ["none"] + list(RATES) if any(r == rate for _, r in keys)]
    for (layout, rate) in keys:
        axis = axes[layouts.index(layout)][rates.index(rate)]
        for library, times in sorted(panels[(layout, rate)].items()):
            sizes = sorted(times)
            style = "-" if library.startswith("chorus") else "--"
            axis.plot([s / 2**20 for s in sizes], [times[s] for s in sizes], style, marker="o", label=library)
        if rate in RATES:
            hosts = int(layout.split("x")[0])
            sizes = sorted({s for times in panels[(layout, rate)].values() for s in times})
            axis.plot([s / 2**20 for s in sizes], [(hosts - 1) / hosts * 2 * s * 8 / RATES[rate] * 1e3 for s in sizes],
                      ":", color="black", label="inter-host bytes at link rate")
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("allreduce size (MiB, float)")
        axis.set_ylabel("time (ms)")
        axis.set_title(f"{layout} (hosts x ranks), link {rate}")
        axis.grid(True, which="both", alpha=0.3)
        axis.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(target, dpi=110)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
