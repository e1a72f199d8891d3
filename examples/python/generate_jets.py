"""Boosted hadronic W jets and QCD jets for a tagger: Pythia 8 at 13 TeV, anti-kT R=0.8 jets from FastJet,
jet images and leading constituents in a compressed NumPy file.

    .venv/bin/python examples/python/generate_jets.py --jets 100000 --out jets.npz   # the full sample
    build/tools/chorus-run -n 4 .venv/bin/python examples/python/generate_jets.py --jets 100000 --out jets.npz
    .venv/bin/python examples/python/generate_jets.py --jets 2000 --preset fast --out small.npz   # in seconds

Signal: q qbar -> W+ W- (Pythia's WeakDoubleBoson:ffbar2WW) with both W decaying to quarks; a jet is signal
when a hadronically decaying W lies within dR < 0.6 of its axis and both of the W's quarks within R. Background:
Pythia's HardQCD:all (light-quark and gluon jets), every jet that passes. Both with the hard process's pT in
220-330 GeV; a jet passes with pT in [--pt-min, --pt-max] (250-300 GeV) and |eta| < 2, at most the two leading
jets of an event.

Each jet becomes (the jet-image preprocessing of Cogan et al. 2015 and de Oliveira et al. 2016):
  image         32x32 float32, pixels of 0.05 x 0.05 in (eta, phi) over [-R, R]^2: centred on the jet's
                pT-weighted centroid, rotated so that its principal axis is vertical (rows), flipped so that
                the right half and the top half hold at least as much pT as the opposite halves, each pixel
                the pT it holds over the jet's pT inside the image (each image sums to 1)
  constituents  (30, 3) float32, the leading 30 constituents' (pT in GeV, eta - eta_jet, phi - phi_jet),
                zero rows where a jet has fewer
  jets          (pT, eta, phi, mass) of the jet
  labels        1 for W, 0 for QCD (uint8)

The file also holds `settings`, a JSON string: every Pythia setting each process was given, the versions, the
seed, the ranks and each rank's events and jets. The preset "full" is Pythia's defaults (multiple parton
interactions, initial- and final-state showers); "fast" turns multiple interactions and initial-state radiation
off, ten times faster, for tests and quick runs.

Under chorus-run (or any chorus launcher) rank r generates its share of each class with seeds of its own, and
rank 0 gathers the jets (and every rank's counts) through chorus and writes the file, jets in rank order,
signal and background interleaved. The same --seed and the same number of ranks give the same arrays bit for
bit.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import numpy as np

import chorus

PIXELS = 32
CONSTITUENTS = 30
RADIUS = 0.8
ETA_MAX = 2.0
MAX_JETS_PER_EVENT = 2

COMMON = ["Beams:eCM = 13000", "PhaseSpace:pTHatMin = 220", "PhaseSpace:pTHatMax = 330", "Print:quiet = on",
          "Random:setSeed = on"]
PROCESSES = {
    "signal": ["WeakDoubleBoson:ffbar2WW = on", "24:onMode = off", "24:onIfAny = 1 2 3 4 5"],
    "background": ["HardQCD:all = on"],
}
PRESETS = {"full": [], "fast": ["PartonLevel:MPI = off", "PartonLevel:ISR = off"]}


@contextmanager
def _elsewhere() -> Iterator[None]:
    """pythia8mc 8.317 runs every file in a directory named `python` under the working directory when it is
    imported (a relative path in its module's start-up), and this repository's root has one: import it from
    this file's directory."""
    here = os.getcwd()
    os.chdir(Path(__file__).resolve().parent)
    try:
        yield
    finally:
        os.chdir(here)


with _elsewhere():
    import pythia8mc

import fastjet  # noqa: E402 - after pythia8mc, as both bundle their own fjcore/FastJet symbols


def pythia_seed(seed: int, rank: int, process: str) -> int:
    """Pythia's Random:seed (1 to 900,000,000) for this rank's process: distinct for every (seed, rank,
    process)."""
    return 1 + (seed * 65536 + rank * 2 + (process == "background")) % 899_999_999


def settings_for(process: str, preset: str, seed: int) -> List[str]:
    return COMMON + PROCESSES[process] + PRESETS[preset] + [f"Random:seed = {seed}"]


def make_pythia(lines: List[str]) -> "pythia8mc.Pythia":
    pythia = pythia8mc.Pythia("", False)
    for line in lines:
        if not pythia.readString(line):
            raise ValueError(f"Pythia refused the setting {line!r}")
    if not pythia.init():
        raise RuntimeError("Pythia's init failed: " + "; ".join(lines))
    return pythia


def visible_final(event) -> List["fastjet.PseudoJet"]:
    """The final-state particles a detector would see (no neutrinos), as FastJet inputs."""
    return [fastjet.PseudoJet(p.px(), p.py(), p.pz(), p.e()) for p in event if p.isFinal() and p.isVisible()]


def hadronic_ws(event) -> List[Tuple[float, float, List[Tuple[float, float]]]]:
    """(eta, phi, [(eta, phi) of its two quarks]) of every W that decays to quarks (its last copy)."""
    found = []
    for p in event:
        if p.idAbs() != 24:
            continue
        first, second = event[p.daughter1()], event[p.daughter2()]
        if p.daughter1() > 0 and first.idAbs() <= 5 and second.idAbs() <= 5:
            found.append((p.eta(), p.phi(), [(first.eta(), first.phi()), (second.eta(), second.phi())]))
    return found


def delta_phi(a, b):
    return (np.asarray(a) - b + np.pi) % (2 * np.pi) - np.pi


def delta_r(eta_a: float, phi_a: float, eta_b: float, phi_b: float) -> float:
    return float(np.hypot(eta_a - eta_b, delta_phi(phi_a, phi_b)))


def jet_image(pt: np.ndarray, eta: np.ndarray, phi: np.ndarray) -> np.ndarray:
    """The 32x32 image of constituents at (eta, phi) relative to the jet axis, preprocessed (module doc)."""
    weights = pt / pt.sum()
    x, y = phi - weights @ phi, eta - weights @ eta  # centred on the pT-weighted centroid
    covariance = np.cov(np.stack([x, y]), aweights=weights, bias=True) if len(pt) > 1 else np.eye(2)
    values, vectors = np.linalg.eigh(covariance)
    major = vectors[:, np.argmax(values)]  # the principal axis, as (x, y)
    angle = np.arctan2(major[0], major[1])  # from the vertical
    cos, sin = np.cos(angle), np.sin(angle)
    x, y = cos * x - sin * y, sin * x + cos * y  # the principal axis onto +y
    edges = np.linspace(-RADIUS, RADIUS, PIXELS + 1)  # symmetric about 0: flipping the grid flips the jet
    image, _, _ = np.histogram2d(y, x, bins=(edges, edges), weights=pt)
    image = image[::-1]  # row 0 at the top: +y
    half = PIXELS // 2
    if image[:, half:].sum() < image[:, :half].sum():
        image = image[:, ::-1]
    if image[:half].sum() < image[half:].sum():
        image = image[::-1]
    total = image.sum()
    return (image / total if total > 0 else image).astype(np.float32)


def leading_constituents(pt: np.ndarray, eta: np.ndarray, phi: np.ndarray) -> np.ndarray:
    order = np.argsort(-pt, kind="stable")[:CONSTITUENTS]
    rows = np.zeros((CONSTITUENTS, 3), np.float32)
    rows[: len(order)] = np.stack([pt[order], eta[order], phi[order]], axis=1)
    return rows


class Sample:
    """One rank's jets of one class."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.images: List[np.ndarray] = []
        self.constituents: List[np.ndarray] = []
        self.jets: List[Tuple[float, float, float, float]] = []
        self.events = 0

    @property
    def full(self) -> bool:
        return len(self.images) >= self.wanted

    def add(self, jet: "fastjet.PseudoJet") -> None:
        parts = jet.constituents()
        pt = np.array([c.pt() for c in parts])
        eta = np.array([c.eta() for c in parts]) - jet.eta()
        phi = delta_phi([c.phi_std() for c in parts], jet.phi_std())
        self.images.append(jet_image(pt, eta, phi))
        self.constituents.append(leading_constituents(pt, eta, phi))
        self.jets.append((jet.pt(), jet.eta(), jet.phi_std(), jet.m()))


def generate(process: str, wanted: int, lines: List[str], pt_window: Tuple[float, float]) -> Sample:
    """Events of `process` until `wanted` jets pass (module doc)."""
    sample = Sample(wanted)
    if wanted == 0:
        return sample
    pythia = make_pythia(lines)
    definition = fastjet.JetDefinition(fastjet.antikt_algorithm, RADIUS)
    while not sample.full:
        if not pythia.next():
            continue
        sample.events += 1
        event = pythia.event
        sequence = fastjet.ClusterSequence(visible_final(event), definition)
        jets = fastjet.sorted_by_pt(sequence.inclusive_jets(pt_window[0] * 0.8))[:MAX_JETS_PER_EVENT]
        ws = hadronic_ws(event) if process == "signal" else []
        for jet in jets:
            if not (pt_window[0] <= jet.pt() <= pt_window[1] and abs(jet.eta()) < ETA_MAX):
                continue
            if process == "signal" and not any(
                    delta_r(jet.eta(), jet.phi_std(), w_eta, w_phi) < 0.6
                    and all(delta_r(jet.eta(), jet.phi_std(), q_eta, q_phi) < RADIUS for q_eta, q_phi in quarks)
                    for w_eta, w_phi, quarks in ws):
                continue
            sample.add(jet)
            if sample.full:
                break
    return sample


def share(total: int, rank: int, size: int) -> int:
    """Rank `rank`'s share of `total` (the first total % size ranks take one more)."""
    return total // size + (rank < total % size)


def interleaved(signal: Sample, background: Sample) -> Dict[str, np.ndarray]:
    """This rank's jets, signal and background alternating (the larger class's surplus at the end)."""
    order = []
    for k in range(max(len(signal.images), len(background.images))):
        order += [(signal, k)] if k < len(signal.images) else []
        order += [(background, k)] if k < len(background.images) else []
    empty = {"images": np.zeros((0, PIXELS, PIXELS), np.float32),
             "constituents": np.zeros((0, CONSTITUENTS, 3), np.float32), "jets": np.zeros((0, 4), np.float32)}
    arrays = {name: np.stack([getattr(s, name)[k] for s, k in order]).astype(np.float32) if order else empty[name]
              for name in ("images", "constituents", "jets")}
    arrays["labels"] = np.array([1 if s is signal else 0 for s, _ in order], np.uint8)
    return arrays


def gathered(comm: chorus.Communicator, mine: Dict[str, np.ndarray], most: int) -> Dict[str, np.ndarray]:
    """Every rank's arrays on rank 0, in rank order (padded to `most` jets each for chorus's gather)."""
    counts = comm.gather(np.array([len(mine["labels"])], np.int64), 0)
    result = {}
    for name, array in mine.items():
        padded = np.zeros((most, *array.shape[1:]), array.dtype)
        padded[: len(array)] = array
        everyone = comm.gather(padded, 0)
        if comm.rank == 0:
            result[name] = np.concatenate([everyone[r, : counts[r, 0]] for r in range(comm.size)])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jets", type=int, default=100_000, help="jets in all, half W and half QCD")
    parser.add_argument("--out", type=Path, default=Path("jets.npz"))
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="full")
    parser.add_argument("--pt-min", type=float, default=250.0)
    parser.add_argument("--pt-max", type=float, default=300.0)
    options = parser.parse_args()
    comm = chorus.init()
    rank, size = comm.rank, comm.size
    started = time.perf_counter()
    halves = {"signal": (options.jets + 1) // 2, "background": options.jets // 2}
    lines = {process: settings_for(process, options.preset, pythia_seed(options.seed, rank, process))
             for process in PROCESSES}
    samples = {process: generate(process, share(halves[process], rank, size), lines[process],
                                 (options.pt_min, options.pt_max)) for process in PROCESSES}
    mine = interleaved(samples["signal"], samples["background"])
    counts = np.array([samples[p].events for p in PROCESSES] + [len(samples[p].images) for p in PROCESSES],
                      np.int64)
    every_count = comm.gather(counts, 0)
    seconds = comm.gather(np.array([time.perf_counter() - started]), 0)
    arrays = gathered(comm, mine, share(halves["signal"], 0, size) + share(halves["background"], 0, size))
    if rank == 0:
        settings = {
            "pythia": pythia8mc.Pythia("", False).parm("Pythia:versionNumber"),
            "fastjet": fastjet.__version__,
            "preset": options.preset, "seed": options.seed, "ranks": size, "jets": options.jets,
            "pt_window_gev": [options.pt_min, options.pt_max], "eta_max": ETA_MAX, "radius": RADIUS,
            "algorithm": "anti-kt", "pixels": PIXELS, "pixel_size": 2 * RADIUS / PIXELS,
            "constituents": CONSTITUENTS, "max_jets_per_event": MAX_JETS_PER_EVENT,
            "settings_rank0": lines,
            "per_rank": [{"rank": r, "seeds": {p: pythia_seed(options.seed, r, p) for p in PROCESSES},
                          "signal_events": int(c[0]), "background_events": int(c[1]),
                          "signal_jets": int(c[2]), "background_jets": int(c[3]), "seconds": float(seconds[r, 0])}
                         for r, c in enumerate(every_count)],
        }
        options.out.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(options.out, settings=np.array(json.dumps(settings)), **arrays)
        events = int(every_count[:, :2].sum())
        print(f"generate: {len(arrays['labels'])} jets ({int(arrays['labels'].sum())} W) from {events} events "
              f"on {size} ranks in {time.perf_counter() - started:.1f} s -> {options.out}", flush=True)
    comm.close()


if __name__ == "__main__":
    main()
