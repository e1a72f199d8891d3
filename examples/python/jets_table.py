"""The W-jet tagger's table, from scratch: generates the sample if it is missing, trains the tagger at each rank
count with every DDP hook and every chorus scheme in Python (train_jet_tagger.py under torchrun) and with every
scheme and codec in C++ (LibTorch: build/examples/jet_tagger under chorus-run), runs population-based training
against random search at equal compute in both, and writes the table, the ROC curves, the time-to-AUC plot and
the members' AUC plots.

    .venv/bin/python examples/python/jets_table.py                      # the documented table (hours on 2 cores)
    .venv/bin/python examples/python/jets_table.py --jets 20000 --epochs 2 --ranks 1 2 --out /tmp/jets-quick

Every run keeps the global batch (--global-batch, split over the ranks) and the learning rate, so the rank
counts train the same optimisation and their AUCs compare; LibTorch gets the cores divided by the ranks. The
runs append to OUT/runs.csv and save their final held-out scores in OUT/scores/; a run already there is not run
again, so an interrupted table resumes. The table goes to --docs (default docs/jets-results.md), the plots beside
it in docs/images/.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.insert(0, str(HERE))
from train_jet_tagger import rejection_at, roc_auc  # noqa: E402

SCHEMES = ["allreduce", "local", "dpsgd", "dpsgd-window", "easgd-sync", "easgd", "gosgd", "one-sided-gossip",
           "tree-easgd"]
CODECS = ["fp16", "bf16", "int8", "onebit"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Run:
    """One training: the trainer (python or cpp), the rank count, the scheme (ddp: Python's DDP) and the hook
    (DDP's) or codec (a scheme's)."""

    def __init__(self, trainer: str, ranks: int, scheme: str, compression: str = "none") -> None:
        self.trainer, self.ranks, self.scheme, self.compression = trainer, ranks, scheme, compression

    @property
    def label(self) -> str:
        return f"{self.trainer}-{self.ranks}-{self.scheme}-{self.compression}"

    def command(self, o: argparse.Namespace, build: Path, scores: Path) -> List[str]:
        common = ["--data", str(o.data), "--epochs", str(o.epochs), "--batch", str(o.global_batch // self.ranks),
                  "--lr", str(o.lr), "--csv", str(o.out / f"{self.label}.csv"), "--scores", str(scores)]
        if self.trainer == "cpp":
            codec = [] if self.compression == "none" else ["--codec", self.compression]
            return [str(build / "tools" / "chorus-run"), "-n", str(self.ranks), "--",
                    str(build / "examples" / "jet_tagger"), "--scheme", self.scheme, *codec, *common]
        flag = "--hook" if self.scheme == "ddp" else "--codec"
        compression = [] if self.compression == "none" else [flag, self.compression]
        return [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(self.ranks),
                "--master-port", str(free_port()), str(HERE / "train_jet_tagger.py"),
                "--scheme", self.scheme, *compression, *common]


def planned(o: argparse.Namespace) -> List[Run]:
    runs = []
    for ranks in o.ranks:
        runs.append(Run("python", ranks, "ddp"))
        runs.append(Run("cpp", ranks, "allreduce"))
        if ranks == 1:
            continue  # one rank: every scheme is plain SGD
        runs += [Run("python", ranks, "ddp", hook) for hook in CODECS]
        runs += [Run("python", ranks, scheme) for scheme in SCHEMES]
        runs += [Run("cpp", ranks, "allreduce", codec) for codec in CODECS]
        runs += [Run("cpp", ranks, scheme) for scheme in SCHEMES if scheme != "allreduce"]
    return [r for r in runs if re.search(o.only, r.label)]


def environment(ranks: int) -> Dict[str, str]:
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // ranks))
    env.setdefault("CHORUS_TIMEOUT", "600")
    return env


def generate(o: argparse.Namespace, build: Path) -> None:
    ranks = str(os.cpu_count() or 1)
    command = [str(build / "tools" / "chorus-run"), "-n", ranks, "--", sys.executable,
               str(HERE / "generate_jets.py"), "--jets", str(o.jets), "--preset", o.preset, "--out", str(o.data)]
    print(f"jets_table: generating {o.jets} jets ({o.preset}) on {ranks} ranks -> {o.data}", flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def run_all(o: argparse.Namespace, build: Path) -> None:
    (o.out / "scores").mkdir(parents=True, exist_ok=True)
    for run in planned(o):
        scores = o.out / "scores" / f"{run.label}.npz"
        if scores.exists():
            continue
        (o.out / f"{run.label}.csv").unlink(missing_ok=True)
        started = time.monotonic()
        done = subprocess.run(run.command(o, build, scores), env=environment(run.ranks), stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
        final = re.findall(r"final auc: ([0-9.]+)", done.stdout)
        print(f"jets_table: {run.label}: exit {done.returncode}, auc {final[-1] if final else '-'}, "
              f"{time.monotonic() - started:.0f} s", flush=True)
        if done.returncode != 0:
            (o.out / f"{run.label}.log").write_text(done.stdout)
            scores.unlink(missing_ok=True)


def search(o: argparse.Namespace, build: Path) -> None:
    """PBT and random search, --members members of one rank each, in both languages (none at 0 epochs)."""
    if o.search_epochs <= 0:
        return
    for trainer in ("python", "cpp"):
        for mode in ("pbt", "random"):
            out = o.out / f"search-{trainer}-{mode}.csv"
            if out.exists():
                continue
            program = ([str(build / "examples" / "jet_pbt")] if trainer == "cpp"
                       else [sys.executable, str(HERE / "pbt_jet_tagger.py")])
            command = [str(build / "tools" / "chorus-run"), "-n", str(o.members), "--", *program, "--data",
                       str(o.data), "--members", str(o.members), "--epochs", str(o.search_epochs), "--mode", mode,
                       "--batch", str(o.global_batch), "--csv", str(out) + ".part"]
            done = subprocess.run(command, env=environment(o.members), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True)
            print(f"jets_table: search {trainer} {mode}: exit {done.returncode}", flush=True)
            if done.returncode == 0:
                Path(str(out) + ".part").rename(out)
            else:
                (o.out / f"search-{trainer}-{mode}.log").write_text(done.stdout)


def rows_of(path: Path) -> List[Dict[str, str]]:
    with open(path) as file:
        return list(csv.DictReader(file))


def summarise(o: argparse.Namespace) -> List[Dict[str, object]]:
    summary = []
    for run in planned(o):
        scores_path, csv_path = o.out / "scores" / f"{run.label}.npz", o.out / f"{run.label}.csv"
        if not scores_path.exists() or not csv_path.exists():
            continue
        with np.load(scores_path) as saved:
            scores, labels = saved["scores"], saved["labels"]
        epochs = rows_of(csv_path)
        summary.append({"run": run, "auc": roc_auc(scores, labels), "rejection": rejection_at(scores, labels),
                        "epochs": [(float(r["wall_s"]), float(r["auc"])) for r in epochs],
                        "wall": float(epochs[-1]["wall_s"]), "bytes": int(epochs[-1]["bytes_rank0"])})
    return summary


def time_to(epochs: List[tuple], target: float) -> Optional[float]:
    return next((wall for wall, auc in epochs if auc >= target), None)


def describe(run: Run) -> str:
    if run.scheme == "ddp":
        return "DDP" + ("" if run.compression == "none" else f" + {run.compression} hook")
    return run.scheme + ("" if run.compression == "none" else f" ({run.compression})")


def table(o: argparse.Namespace, summary: List[Dict[str, object]], target: float, baseline: float) -> str:
    lines = ["| ranks | trainer | scheme | AUC | AUC - 1 rank | rejection at 50% | time to AUC "
             f"{target:.3f} (s) | wall (s) | MB sent by rank 0 |", "|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        run = s["run"]
        reached = time_to(s["epochs"], target)
        lines.append(f"| {run.ranks} | {'C++ LibTorch' if run.trainer == 'cpp' else 'Python'} | {describe(run)} | "
                     f"{s['auc']:.4f} | {s['auc'] - baseline:+.4f} | {s['rejection']:.1f} | "
                     f"{'not reached' if reached is None else f'{reached:.0f}'} | {s['wall']:.0f} | "
                     f"{s['bytes'] / 1e6:.1f} |")
    return "\n".join(lines)


def search_table(o: argparse.Namespace) -> str:
    lines = ["| trainer | mode | best member's AUC | its learning rate | its momentum | members' mean AUC | wall (s) |",
             "|---|---|---|---|---|---|---|"]
    for trainer in ("python", "cpp"):
        for mode in ("pbt", "random"):
            path = o.out / f"search-{trainer}-{mode}.csv"
            if not path.exists():
                continue
            rows = rows_of(path)
            if not rows:
                continue
            last_epoch = max(int(r["epoch"]) for r in rows)
            last = [r for r in rows if int(r["epoch"]) == last_epoch]
            best = max(last, key=lambda r: float(r["auc"]))
            lines.append(f"| {'C++ LibTorch' if trainer == 'cpp' else 'Python'} | {mode} | {float(best['auc']):.4f} | "
                         f"{float(best['lr']):.4g} | {float(best['momentum']):.3f} | "
                         f"{np.mean([float(r['auc']) for r in last]):.4f} | {float(best['wall_s']):.0f} |")
    return "\n".join(lines)


def plots(o: argparse.Namespace, summary: List[Dict[str, object]], images: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    images.mkdir(parents=True, exist_ok=True)
    top = max(o.ranks)
    chosen = [s for s in summary if s["run"].ranks == 1 or (s["run"].ranks == top and s["run"].compression == "none")]
    figure, axis = plt.subplots(figsize=(7, 5))
    for s in chosen:
        with np.load(o.out / "scores" / f"{s['run'].label}.npz") as saved:
            scores, labels = saved["scores"], saved["labels"]
        cuts = np.sort(scores[labels == 1])[::-1]
        signal = np.arange(1, len(cuts) + 1) / len(cuts)
        background = np.searchsorted(np.sort(scores[labels == 0]), cuts, side="left")
        kept = (np.sum(labels == 0) - background) / np.sum(labels == 0)
        axis.plot(signal, 1 / np.maximum(kept, 1 / np.sum(labels == 0)), linewidth=1,
                  label=f"{s['run'].ranks} rank{'s' if s['run'].ranks > 1 else ''}, "
                        f"{'C++' if s['run'].trainer == 'cpp' else 'Python'} {describe(s['run'])}")
    axis.set_yscale("log")
    axis.set_xlabel("W jet efficiency")
    axis.set_ylabel("QCD rejection (1 / efficiency)")
    axis.set_title("ROC: W vs QCD jets, held-out set")
    axis.legend(fontsize=6)
    figure.tight_layout()
    figure.savefig(images / "jets_roc.png", dpi=120)

    figure, axes = plt.subplots(1, len(o.ranks), figsize=(5 * len(o.ranks), 4.5), sharey=True, squeeze=False)
    for axis, ranks in zip(axes[0], o.ranks):
        for s in summary:
            if s["run"].ranks == ranks:
                walls, aucs = zip(*s["epochs"])
                axis.plot(walls, aucs, marker=".", linewidth=1,
                          label=f"{'C++' if s['run'].trainer == 'cpp' else 'Py'} {describe(s['run'])}")
        axis.set_title(f"{ranks} rank{'s' if ranks > 1 else ''}")
        axis.set_xlabel("wall time (s)")
        axis.legend(fontsize=5)
    axes[0][0].set_ylabel("held-out AUC (rank 0's model, per epoch)")
    figure.tight_layout()
    figure.savefig(images / "jets_time_to_auc.png", dpi=120)

    for trainer in ("python", "cpp"):
        figure, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
        for axis, mode in zip(axes, ("pbt", "random")):
            path = o.out / f"search-{trainer}-{mode}.csv"
            if not path.exists():
                continue
            rows = rows_of(path)
            for m in sorted({int(r["member"]) for r in rows}):
                mine = [r for r in rows if int(r["member"]) == m]
                axis.plot([int(r["epoch"]) for r in mine], [float(r["auc"]) for r in mine], marker="o",
                          label=f"member {m}: lr {float(mine[-1]['lr']):.3g}, momentum {float(mine[-1]['momentum']):.2f}")
                for r in mine:
                    if int(r["copied_from"]) >= 0:
                        axis.annotate(f"<- {r['copied_from']}", (int(r["epoch"]), float(r["auc"])), fontsize=7)
            axis.set_title(f"{'C++' if trainer == 'cpp' else 'Python'}: {mode}")
            axis.set_xlabel("epoch")
            axis.legend(fontsize=7)
        axes[0].set_ylabel("held-out AUC")
        figure.tight_layout()
        figure.savefig(images / f"jets_search_{trainer}.png", dpi=120)


def write_docs(o: argparse.Namespace) -> None:
    summary = summarise(o)
    singles = [s for s in summary if s["run"].ranks == 1 and s["run"].trainer == "python"]
    baseline = singles[0]["auc"] if singles else float("nan")
    target = o.target_auc if o.target_auc else round(baseline - 0.003, 3)
    images = o.docs.parent / "images"
    plots(o, summary, images)
    with np.load(o.data) as file:
        jets = len(file["labels"])
    relative = os.path.relpath(images, o.docs.parent)
    o.docs.write_text(
        "# The W-jet tagger's table\n\n"
        f"Generated by `examples/python/jets_table.py` ({time.strftime('%Y-%m-%d')}, {os.cpu_count()} cores): "
        f"{jets} jets from `{o.data.name}`, the last 20% held out; {o.epochs} epochs at a global batch of "
        f"{o.global_batch} (split over the ranks), learning rate {o.lr}; the CNN. AUC and rejection are the final "
        "model's (after the scheme's finish()); the time to the AUC is the first epoch's end at which rank 0's "
        f"model reached {target:.3f}; bytes are those rank 0 sent for its scheme (DDP: its gradients handed to "
        "the allreduce; the shared-memory allreduce sends no messages, so allreduce-SGD in one host counts 0).\n\n"
        + table(o, summary, target, baseline)
        + f"\n\n![ROC curves]({relative}/jets_roc.png)\n\n![AUC against wall time]({relative}/jets_time_to_auc.png)\n\n"
        "## Population-based training against random search\n\n"
        f"{o.members} members of one rank each, {o.search_epochs} epochs, the same starting draws in both modes "
        "(equal compute); PBT exploits every 2 epochs.\n\n" + search_table(o)
        + f"\n\n![Python search]({relative}/jets_search_python.png)\n\n![C++ search]({relative}/jets_search_cpp.png)\n")
    print(f"jets_table: wrote {o.docs}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=ROOT / "jets.npz")
    parser.add_argument("--jets", type=int, default=100000, help="generated when --data is missing")
    parser.add_argument("--preset", choices=["fast", "full"], default="full")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--global-batch", type=int, default=128)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--target-auc", type=float, default=None, help="default: the 1-rank AUC - 0.003")
    parser.add_argument("--members", type=int, default=4)
    parser.add_argument("--search-epochs", type=int, default=6)
    parser.add_argument("--only", default="", help="a regular expression on the runs' labels")
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "jets")
    parser.add_argument("--docs", type=Path, default=ROOT / "docs" / "jets-results.md")
    parser.add_argument("--build", type=Path, default=ROOT / os.environ.get("CHORUS_BUILD_DIR", "build"))
    o = parser.parse_args()
    o.out.mkdir(parents=True, exist_ok=True)
    if not o.data.exists():
        generate(o, o.build)
    run_all(o, o.build)
    search(o, o.build)
    write_docs(o)


if __name__ == "__main__":
    main()
