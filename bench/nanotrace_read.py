"""How long reading a large `.nanotrace` takes, and its peak memory (issue 46: a
generated "large" sample of 9.2 M events; MAX_EVENTS is 20 M).

Writes a version 1 file the way cutedsl-trace lays one out (tests/support/
nanotrace_files.py's layout: blocks of lanes, each lane a track of u32-offset events,
two formats, one with an argument), of --events events over --lanes-per-block lanes,
then reads it with gpu_agent.timeline.nanotrace.read in a fresh process, --rounds
times, and prints the median wall time, the peak RSS (VmHWM of that process) and
what it was before the read, and per event the time and the peak's growth.

Usage: .venv/bin/python bench/nanotrace_read.py [--events 1000000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import struct
import subprocess
import sys
import tempfile
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# the peak is VmHWM, this process's own: ru_maxrss survives exec, so it held the
# parent's peak (the generated file's parts), 297 MiB before a 9.2 M-event read began
READ = r"""
import sys, time
sys.path.insert(0, sys.argv[1])
from gpu_agent.timeline import nanotrace as nt

def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

r0 = hwm()
t0 = time.perf_counter()
t = nt.read(sys.argv[2])
dt = time.perf_counter() - t0
n = len(t.events)
print(n, dt, hwm(), r0)
"""


def v1_file(events: int, lanes_per_block: int = 64, per_lane: int = 100) -> bytes:
    """About `events` events: blocks of lanes_per_block lanes with per_lane events each."""

    def s(text: str) -> bytes:
        return struct.pack("<H", len(text)) + text.encode()

    lanes = max(1, events // per_lane)
    blocks = max(1, lanes // lanes_per_block)
    lanes = blocks * lanes_per_block
    body = s("big_kernel") + struct.pack("<3I3I", blocks, 1, 1, 1, 1, 1)
    formats = [("Warp {lane}", "", 0), ("tma load", "stage {0}", 1), ("mma", "", 0)]
    body += struct.pack("<IIIQ", len(formats), blocks, lanes, lanes * per_lane)
    for label, tip, n in formats:
        body += s(label) + s(tip) + bytes([n])
    parts = [body]
    for b in range(blocks):
        parts.append(struct.pack("<IIHH", b, b % 132, 3, 0))
    for b in range(blocks):
        for lane in range(lanes_per_block):
            rec = [struct.pack("<IHI", b, 0, lane * 32) + struct.pack("<I", per_lane)]
            for k in range(per_lane):
                fmt = 1 + k % 2
                rec.append(struct.pack("<IIH", 100 * k + lane, 40, fmt) + (struct.pack("<I", k) if fmt == 1 else b""))
            parts.append(b"".join(rec))
    return b"nanotrace\0" + bytes([1, 1]) + zlib.compress(b"".join(parts), 1)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "big.nanotrace"
        path.write_bytes(v1_file(a.events))
        runs = []
        for _ in range(a.rounds):
            out = subprocess.run(
                [sys.executable, "-c", READ, str(REPO / "agent"), str(path)], capture_output=True, text=True
            )
            if out.returncode:
                raise SystemExit(out.stderr.strip().splitlines()[-1])
            n, dt, rss, base = out.stdout.split()
            runs.append((int(n), float(dt), int(rss), int(base)))
        n = runs[0][0]
        dt = statistics.median(r[1] for r in runs)
        rss = statistics.median(r[2] for r in runs)
        base = statistics.median(r[3] for r in runs)
        print(
            f"{n} events, file {path.stat().st_size / 1e6:.1f} MB: read in {dt:.2f} s (median of {a.rounds}), "
            f"peak RSS {rss / 2**20:.0f} MiB ({base / 2**20:.0f} MiB before the read); "
            f"{1e6 * dt / n:.2f} us and {(rss - base) / n:.0f} bytes an event"
        )


if __name__ == "__main__":
    main()
