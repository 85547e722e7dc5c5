"""Helpers shared by the commands that profile: duration parsing, status lines."""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path

_UNITS = {"ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0, "": 1.0}


def byte_size(text: str) -> int:
    """'64MiB', '512k', '1000000' -> bytes (positive)."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1)
    num = t[:-1] if t[-1:] in "KMG" and t[-1:] else t
    try:
        v = int(float(num) * mult)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid size {text!r} (examples: 64MiB, 512k, 1000000)")
    if v <= 0:
        raise argparse.ArgumentTypeError(f"invalid size {text!r}: must be positive")
    return v


def positive_int(text: str) -> int:
    """An argparse type: a count of at least 1."""
    try:
        v = int(text)
    except ValueError:
        v = 0
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


_PART = r"([0-9]*\.?[0-9]+)\s*(ms|s|m|h)"


def duration(text: str) -> float:
    """'10s', '500ms', '2m', '1h2m', '1m30s', '1.5' (seconds) -> seconds."""
    t = text.strip()
    if re.fullmatch(r"[0-9]*\.?[0-9]+", t):
        secs = float(t)
    elif re.fullmatch(rf"(?:{_PART}\s*)+", t):
        secs = sum(float(n) * _UNITS[u] for n, u in re.findall(_PART, t))
    else:
        secs = 0
    if secs <= 0:
        raise argparse.ArgumentTypeError(f"invalid duration {text!r} (examples: 10s, 500ms, 2m, 1h2m)")
    return secs


def say_loading(then: str) -> None:
    """The wait before the probes watch (their compile and attach, seconds: docs/
    benchmarks.md's "Agent start"), said at once on stderr, on a terminal or a pipe
    (issue 45: `run &` printed nothing for 6 s, and a workload started meanwhile was
    missed)."""
    print(f"gpu-agent: loading the eBPF probes (a few seconds), then {then}", file=sys.stderr, flush=True)


def drops(counters: dict) -> int:
    return sum(v for k, v in counters.items() if "drop" in k.lower())


def status_line(stats, counters: dict) -> str:
    dropped = {k: v for k, v in counters.items() if "drop" in k.lower() and v}
    detail = " (" + ", ".join(f"{k}={v}" for k, v in sorted(dropped.items())) + ")" if dropped else ""
    return (
        f"processes={stats.processes} kernels={stats.kernels} "
        f"gpu_time={stats.gpu_ns / 1e6:.3f}ms samples={stats.samples} "
        # drops are counted from the agent's start (the rest of the line is the interval's)
        f"drops={drops(counters)}{' since start' if dropped else ''}{detail}"
        # Not drops: a windowed record whose sampled launch was older than its
        # window (bpf join guard), counted as unsampled instead.
        + (f" stale_join={counters['stale_join']}" if counters.get("stale_join") else "")
        # Short jobs that ran between collection windows: seen, not measured.
        + (f" attached_without_kernels={stats.attached_without_kernels}" if stats.attached_without_kernels else "")
        # Kernels with no launch sampled in this interval: split by their stacks of an
        # earlier one (carried), or under [unsampled] (never sampled).
        + (f" carried_kernels={stats.carried_kernels}" if stats.carried_kernels else "")
        + (f" unsampled_kernels={stats.unsampled_kernels}" if stats.unsampled_kernels else "")
        # Stacks named [stack unavailable] (BPF's copy gone), and stacks with no
        # native frame, since the start.
        + (f" stacks_missing={counters['agent_stacks_missing']}" if counters.get("agent_stacks_missing") else "")
        + (
            f" stacks_without_native={counters['agent_stacks_without_native']}"
            if counters.get("agent_stacks_without_native")
            else ""
        )
        # Python frames named <python code 0x...>: their code object was gone (its
        # process exited, or it was freed) before the agent read its name; since the start.
        + (
            f" python_unnamed_frames={counters['python_unnamed_frames']}"
            if counters.get("python_unnamed_frames")
            else ""
        )
        # Python processes that exited before their Python stacks could be set up (a
        # failed probe is tried again up to 10 times, a second apart; warned once a reason).
        + (f" python_not_set_up={counters['python_not_set_up']}" if counters.get("python_not_set_up") else "")
        # Launches whose records CUPTI lost: [dropped: cupti] samples.
        + (f" dropped_launches={stats.dropped_launches}" if stats.dropped_launches else "")
        # parcagpu's error probes (each kind logged once): why its PC samples may be missing.
        + (f" pg_errors={counters['pg_errors']}" if counters.get("pg_errors") else "")
        # How long the interval waited past its end for its processes' periods
        # (join/placement.py), and launches estimated for intervals already out.
        + (f" waited={stats.waited_ns / 1e9:.1f}s" if getattr(stats, "waited_ns", 0) >= 1e9 else "")
        + (f" late_launches={counters['agent_late_launches']}" if counters.get("agent_late_launches") else "")
        # Periods whose launches were split over the intervals by their shapes (the
        # rest by time): so far, in all.
        + (f" shaped_spans={counters['agent_shaped_spans']}" if counters.get("agent_shaped_spans") else "")
        # Graph kernels whose node's capture stack was never seen (captured before
        # the attach: [graph captured before attach]), and the capture stacks seen;
        # since the start.
        + (
            f" graph_kernels_without_capture={counters['graph_node_unknown']}"
            f" graph_capture_stacks={counters.get('graph_nodes', 0)}"
            if counters.get("graph_node_unknown")
            else ""
        )
    )


def _unwritable(d: Path, create: bool = True) -> str | None:
    """Why a file cannot be written into directory d (created if missing and
    `create`), or None. Tries a real file: permissions, read-only mounts and a full
    disk all show."""
    if not create and not d.is_dir():
        return f"no directory {d}" if not d.exists() else f"{d} is not a directory"
    try:
        d.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=d, prefix=".gpu-agent-check-") as f:
            f.write(b"x")
            f.flush()
            os.fsync(f.fileno())
    except OSError as e:
        return str(e.strerror or e)
    return None


def dir_error(d: Path) -> str | None:
    """Why files cannot be written into directory d, or None."""
    why = _unwritable(d)
    return f"cannot write into {d}: {why}" if why else None


def output_error(path: Path) -> str | None:
    """Why `path` cannot take the profile (checked before any workload runs), or None.
    Its directory must exist: the agent runs as root and creates none for a typo."""
    if path.is_dir():
        return f"{path} is a directory"
    from ..system.atomic import invoker_may_not_write

    why = _unwritable(path.parent, create=False) or invoker_may_not_write(path)
    return f"cannot write {path}: {why}" if why else None
