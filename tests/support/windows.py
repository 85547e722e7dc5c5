"""What the shim's collection windows leave for the tests to read: a profile's
per-kernel totals, the shim's exit line and its period lines."""

from __future__ import annotations

import bisect
import re
import subprocess
from pathlib import Path
from typing import NamedTuple

from support.pprof_tool import raw

KERNEL = "_Z16k_cuLaunchKernelPfi"
# The tests of the weights that count every launch (launch callbacks on between
# windows): GPU_AGENT_TEARDOWN=0. By default CUPTI is torn down after every
# window and the launches between windows are extrapolated from a count phase
# (tests/test_teardown.py).


# One period line of the shim (GPU_AGENT_DEBUG=2, shim/src/window.cpp's
# ga_window_extrapolated), with teardowns between windows.
PERIOD_LINE = re.compile(
    r"period \(pid \d+\): ended at ([\d.]+) s \(CLOCK_MONOTONIC\) after ([\d.]+) ms; .*?; "
    r"busy [\d.]+ ms of [\d.]+ ms( \(not used\))?; "
    r"hook [\d.]+ hits at -?[\d.]+( \(not used\))?( \(slots added\))?( \(cut\))?; "
    r"rest [\d.]+ ms at (\d+)/s \(count phase (-?\d+)/s\); (\d+) launches \(clocks (\d+)\)$",
    re.M,
)


class Period(NamedTuple):
    start: float  # CLOCK_MONOTONIC s
    end: float
    busy_used: bool  # the busy clock's estimate stood
    hook_used: bool  # the launch counter's stood
    slots_added: bool  # the counter gained slots in it (its hits after that: at the next calibration)
    cut: bool  # it ended where the launch mix changed (shim/src/mix.cpp), not at its planned end
    rest_rate: int  # launches/s the rest of the period went at
    count_rate: int  # the count phase's launches/s (-1: none)
    est: int  # the period's launches
    clocks: int  # what the clocks alone said


# A period whose counter slots grew gets the launches of its hits after the growth
# one period later, at the next calibration (shim/src/window.cpp's g_grew_wait).
MORE_LINE = re.compile(r"period \(pid \d+\): (\d+) launches more for the period that ended at ([\d.]+) s")


def periods(stderr: str) -> list[Period]:
    """Every period line of the shim's stderr, in order, with the launches that
    came later for it (MORE_LINE) in its est."""
    more: dict[str, int] = {}
    for m in MORE_LINE.finditer(stderr):
        more[m[2]] = more.get(m[2], 0) + int(m[1])
    found = [
        Period(
            float(m[1]) - float(m[2]) / 1e3,
            float(m[1]),
            not m[3],
            not m[4],
            bool(m[5]),
            bool(m[6]),
            *map(int, m.groups()[6:]),
        )
        for m in PERIOD_LINE.finditer(stderr)
    ]
    ends = [m[1] for m in PERIOD_LINE.finditer(stderr)]
    return [p._replace(est=p.est + more.get(end, 0)) for p, end in zip(found, ends)]


def kernel_totals(profile) -> dict[str, list[int]]:
    """mangled kernel name -> [gpu_ns, launches], read by Go pprof."""
    prof: dict[str, list[int]] = {}
    for s in raw(profile):
        if s.files and s.files[0] == "CUDA_KERNEL":
            acc = prof.setdefault(s.system_names[0] or s.frames[0], [0, 0])
            acc[0] += s.values[0]
            acc[1] += s.values[1]
    return prof


def shim_exit_stats(stderr: str) -> dict[str, int]:
    m = re.search(
        r"exit \(pid \d+\): (\d+) launches collected, (\d+) kernel records "
        r"\(\d+ lost by CUPTI\), (\d+) windows"
        r".*, (\d+) records of unseen launches \((\d+) of them late",
        stderr,
    )
    assert m, stderr[-2000:]
    return dict(zip(("launches", "records", "windows", "unseen", "late"), map(int, m.groups())))


def launches_at(trace: list[tuple[float, int]], t: float) -> float:
    """A mock loop's launches by time t, interpolated in its MOCK_LAUNCH_TRACE (one
    line "seconds launches" per 1 000 launches)."""
    ts = [x for x, _ in trace]
    i = bisect.bisect_left(ts, t)
    if i == 0:
        return 0.0
    if i == len(ts):
        return float(trace[-1][1])
    (t0, n0), (t1, n1) = trace[i - 1], trace[i]
    return n0 + (n1 - n0) * (t - t0) / (t1 - t0)


def launches_bracket(trace: list[tuple[float, int]], lo: float, hi: float) -> tuple[int, int]:
    """The loop's launches in [lo, hi] as the trace's lines bound them: (those
    certainly inside, those possibly inside). The lines come every 1 000 launches and
    at each gap's two ends; between two lines the loop may have been preempted
    anywhere, so interpolating there can put up to 1 000 launches on the wrong side of
    an edge (2.3 % of a period once, in a two-worker suite)."""
    ts = [x for x, _ in trace]

    def made_by(t: float) -> int:  # certainly
        return trace[bisect.bisect_right(ts, t) - 1][1] if t >= ts[0] else 0

    def at_most_by(t: float) -> int:
        return trace[min(bisect.bisect_left(ts, t), len(ts) - 1)][1]

    return max(0, made_by(hi) - at_most_by(lo)), at_most_by(hi) - made_by(lo)


def launches_between(trace: list[tuple[float, int]], lo: float, hi: float) -> float:
    """The loop's launches in [lo, hi]."""
    return launches_at(trace, hi) - launches_at(trace, lo)


def stall_slack(trace: list[tuple[float, int]], t: float, poll_s: float, rate: float) -> float:
    """The launches a shim polling every poll_s could not place on the right side of t.

    The shim notes its launch count at every poll (shape.cpp) and spreads a span's
    launches linearly between two notes. Where the whole process stopped (a VM's
    vCPU taken away, SIGSTOP, a long preemption), its poller stopped too: the next
    note comes after the loop has resumed and caught up with its pacing in a burst,
    and the burst is spread over the stop. So where t lies within a poll of a pause
    longer than a poll that ends in a burst (more than 1.5 times the rate's launches
    in the poll after it), the launches in the poll before the pause and after it
    may fall on either side of t; elsewhere none. Seen on a CI machine: one edge's
    interval -1.09 % and the next +1.20 %; here the loop stopped 30 ms every 0.37 s
    (SIGSTOP) read such pairs up to 1.5 %, each within this slack."""
    slack = 0.0
    for (ta, _), (tb, _) in zip(trace, trace[1:]):
        if tb - ta <= poll_s or not ta - poll_s <= t <= tb + poll_s:
            continue
        after = launches_between(trace, tb, tb + poll_s)
        if after > 1.5 * rate * poll_s:
            slack += launches_between(trace, ta - poll_s, ta) + after
    return slack


def run_traced(cmd: list, env: dict, trace_file, timeout: float = 180) -> tuple[str, list[tuple[float, int]]]:
    """Run a mock loop that writes its launches over time (MOCK_LAUNCH_TRACE=trace_file
    in env; under `gpu-agent record`): its stderr, and the trace's (seconds, launches)."""
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stderr, read_trace(trace_file)


def read_trace(trace_file) -> list[tuple[float, int]]:
    """A mock loop's MOCK_LAUNCH_TRACE: (seconds on CLOCK_MONOTONIC, launches so far)."""
    return [(float(t), int(n)) for t, n in (ln.split() for ln in Path(trace_file).read_text().splitlines())]
