"""Firing the probe firer's scripts (tests/probe_firer) into a running Collector."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path


def fire_into(collector, exe: Path, script: Path, kernels: int, timeout: float = 5.0) -> None:
    """Runs the firer's script and waits until BPF has aggregated `kernels` records.
    Nothing polls the ring buffer meanwhile: what the collector makes of queued
    events is part of what the callers test."""
    p = subprocess.run([str(exe), str(script)], capture_output=True, text=True, timeout=30)
    assert p.returncode == 0, p.stderr
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and collector.session.counters()["kernels"] < kernels:
        time.sleep(0.05)
