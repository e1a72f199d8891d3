"""The flight recorder and the timeline from Python: chorus.record's
entries and dumps, torch's names under the torch backend, the desync report
on a torchrun job's dumps, and a CHORUS_TRACE timeline checked against the
trace-event schema, summarised and plotted by chorus-trace."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import defaultdict

import pytest

from conftest import ROOT, chorus_run_path, require_passed, run_chorus, run_torchrun


def chorus_trace(*args: str) -> subprocess.CompletedProcess:
    # Run with this Python: plot needs matplotlib, which the project's environment has.
    return subprocess.run([sys.executable, str(chorus_run_path().parent / "chorus-trace"), *args],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)


def test_entries_agree_and_dump_on_request():
    require_passed(run_chorus(3, "recording.py", "entries"), 3)


def test_nothing_recorded_when_off():
    require_passed(run_chorus(1, "recording.py", "off", env={"CHORUS_RECORD": "0"}), 1)


def test_torch_backend_records_torch_names():
    pytest.importorskip("torch")
    require_passed(run_torchrun(3, "recording.py", "torch-names"), 3)


def test_report_on_a_torchrun_job_where_rank_2_skips(tmp_path):
    pytest.importorskip("torch")
    done = run_torchrun(3, "recording.py", "torch-skip",
                        env={"CHORUS_RECORD_DIR": str(tmp_path), "CHORUS_TIMEOUT": "5"}, timeout=240)
    assert done.returncode != 0, done.stdout[-4000:]
    written = sorted(path.name for path in tmp_path.glob("rank-*.json"))
    assert written == ["rank-0.json", "rank-1.json", "rank-2.json"], (written, done.stdout[-4000:])
    reasons = {json.loads((tmp_path / name).read_text())["reason"] for name in written}
    assert reasons <= {"error", "terminated", "exit"}, reasons
    report = chorus_trace("report", str(tmp_path))
    assert report.returncode == 1, report.stdout
    found = re.search(r"BEHIND: rank 2 never posted #(\d+); ranks 0, 1 wait in allreduce #(\d+) of 1 MiB float32 sum",
                      report.stdout)
    assert found and found.group(1) == found.group(2), report.stdout
    assert re.search(r"rank 2: its last collective is broadcast #\d+", report.stdout), report.stdout


def spans_nest(events):
    """Per track (pid, tid): spans start in order, and two spans overlap only
    when one holds the other."""
    tracks = defaultdict(list)
    for event in events:
        if event["ph"] == "X":
            tracks[(event["pid"], event["tid"])].append(event)
    for track in tracks.values():
        starts = [event["ts"] for event in track]
        assert starts == sorted(starts), "spans of a track in order of start"
        open_ends = []
        for event in track:
            while open_ends and open_ends[-1] <= event["ts"]:
                open_ends.pop()
            end = event["ts"] + event["dur"]
            assert not open_ends or end <= open_ends[-1] + 0.002, f"{event} overlaps the span it starts in"
            assert open_ends or event["cat"] != "phase", f"phase {event} outside any call"
            open_ends.append(end)


def test_timeline_is_valid_trace_events_nested_summarised_and_plotted(tmp_path):
    jsonschema = pytest.importorskip("jsonschema")
    timeline = tmp_path / "timeline.json"
    perf = chorus_run_path().parent / "chorus-perf"
    done = subprocess.run([str(chorus_run_path()), "-n", "3", str(perf), "allreduce", "-b", "8", "-e", "1M", "-f", "32",
                           "-n", "3", "-w", "1"], env={**os.environ, "CHORUS_TRACE": str(timeline)},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
    assert done.returncode == 0, done.stdout[-4000:]
    assert timeline.exists() and not list(tmp_path.glob("timeline.rank-*.json")), done.stdout[-4000:]
    trace = json.loads(timeline.read_text())
    schema = json.loads((ROOT / "tools" / "trace-event.schema.json").read_text())
    jsonschema.validate(trace, schema)
    events = trace["traceEvents"]
    assert {e["pid"] for e in events} == {0, 1, 2}
    names = {e["name"] for e in events if e["ph"] == "X"}
    assert {"allreduce", "shared-memory reduce", "shared-memory copy in"} <= names, names
    spans_nest(events)

    summary = chorus_trace("summary", str(timeline))
    assert summary.returncode == 0, summary.stdout
    assert re.search(r"^allreduce\s+collective\s+\d+", summary.stdout, re.M), summary.stdout
    assert "waiting for the slowest rank" in summary.stdout, summary.stdout
    assert re.search(r"^shared-memory reduce\s+\d+", summary.stdout, re.M), summary.stdout

    pytest.importorskip("matplotlib")
    picture = tmp_path / "timeline.png"
    plotted = chorus_trace("plot", str(timeline), "-o", str(picture))
    assert plotted.returncode == 0, plotted.stdout
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
