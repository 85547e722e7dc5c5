"""Read profiles through Go's real pprof binary (never our own decoder).

`pprof -raw` prints exact integer values, location ids per sample and a
location table; this module parses that text into plain Python values.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pprof_binary() -> str:
    for cand in (os.environ.get("PPROF"), str(REPO / "build" / "tools" / "pprof"), shutil.which("pprof")):
        if cand and os.path.exists(cand):
            return cand
    raise RuntimeError(
        "Go pprof not found: run `make build/tools/pprof` (needs golang-go and golang-github-google-pprof-dev)"
    )


def pprof(*args: str) -> str:
    out = subprocess.run([pprof_binary(), *args], capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError(f"pprof {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


@dataclass
class Sample:
    values: list[int]
    frames: list[str]  # function names, leaf first
    files: list[str]
    system_names: list[str]  # mangled names where they differ from the function name
    labels: dict[str, str] = field(default_factory=dict)
    lines: list[int] = field(default_factory=list)  # source line per frame (0: none)


_SAMPLE = re.compile(r"^\s*((?:-?\d+\s+)+)(-?\d+):\s*((?:\d+\s*)*)$")
# "  id: 0xaddr M=n function file:line s=start[(system_name)]"; inlined frames continue below.
_LOC = re.compile(r"^\s*(\d+):\s+0x[0-9a-f]+\s+(?:M=\d+\s+)?(.*?)\s+(\S*):(-?\d+)\s+s=\d+(?:\((.*)\))?\s*$")
_LOC_CONT = re.compile(r"^\s+(.*?)\s+(\S*):(-?\d+)\s+s=\d+(?:\(.*\))?\s*$")


def raw(path) -> list[Sample]:
    text = pprof("-raw", str(path))
    samples: list[tuple[list[int], list[int], dict]] = []
    locs: dict[int, list[tuple[str, str, str, int]]] = {}
    section = None
    last_loc = None
    for line in text.splitlines():
        if line.startswith("Samples:"):
            section = "samples"
            continue
        if line.startswith("Locations"):
            section = "locations"
            continue
        if line.startswith("Mappings"):
            section = None
            continue
        if section == "samples":
            m = _SAMPLE.match(line)
            if m:
                vals = [int(v) for v in m.group(1).split()] + [int(m.group(2))]
                samples.append((vals, [int(i) for i in m.group(3).split()], {}))
            elif ":[" in line and samples:
                # labels line: "key:[value] key2:[value2]"
                for k, v in re.findall(r"(\w+):\[([^\]]*)\]", line):
                    samples[-1][2][k] = v
        elif section == "locations":
            m = _LOC.match(line)
            if m:
                last_loc = int(m.group(1))
                locs[last_loc] = [(m.group(2), m.group(3), m.group(5) or m.group(2), int(m.group(4)))]
                continue
            m = _LOC_CONT.match(line)
            if m and last_loc is not None:
                locs[last_loc].append((m.group(1), m.group(2), m.group(1), int(m.group(3))))
    out = []
    for vals, ids, labels in samples:
        frames, files, sys_names, lines = [], [], [], []
        for i in ids:
            for fn, file, sysname, line in locs.get(i, [("?", "?", "?", 0)]):
                frames.append(fn)
                files.append(file)
                sys_names.append(sysname)
                lines.append(line)
        out.append(Sample(vals, frames, files, sys_names, labels, lines))
    return out


def top(path, *extra: str) -> str:
    return pprof("-top", *extra, str(path))


_TIME = re.compile(r"^Time: (\S+ \S+) ", re.M)


def profile_start_ns(path) -> int:
    """The profile's time (CLOCK_REALTIME ns), as Go pprof prints it."""
    from datetime import datetime, timezone

    stamp = _TIME.search(pprof("-raw", str(path))).group(1)
    whole, frac = stamp.split(".")
    t = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc)
    return int(t.timestamp()) * 1_000_000_000 + int(frac.ljust(9, "0"))


def profile_duration_s(path) -> float:
    """The profile's duration, as Go pprof's -top prints it (a Go duration: 1.99s, 987.73ms, 1m5s)."""
    text = re.search(r"^Duration: ([^,]+),", pprof("-top", str(path)), re.M)[1]
    unit = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    return sum(float(v) * unit[u] for v, u in re.findall(r"([\d.]+)(h|ms|us|µs|ns|m|s)", text))
