"""CPU time the hypervisor took from the guest's CPUs, over time (/proc/stat's `steal`).

The device machines are KVM guests. Side by side on an H200 (docs/benchmarks.md), one
process of a pair ran 30-55 % slower for stretches of seconds, whichever config it
ran, and mostly on the same half of the CPUs. A guest's scheduler cannot see why; the
host's theft of a vCPU shows in that vCPU's `steal` column. `Steal(cpus)` samples the
sum of those CPUs' steal and total ticks every `every` seconds on a thread, stamped
with time.monotonic() (the clock the cases' block traces use), so a block's slowness
can be set against the steal in its span (`fraction_in`).
"""

from __future__ import annotations

import threading
import time


def read_ticks(cpus: list[int]) -> tuple[int, int]:
    """(steal, total) ticks summed over cpus, from /proc/stat's per-CPU lines."""
    steal = total = 0
    want = {f"cpu{c}" for c in cpus}
    with open("/proc/stat") as f:
        for line in f:
            parts = line.split()
            if parts and parts[0] in want:
                ticks = [int(x) for x in parts[1:]]
                steal += ticks[7] if len(ticks) > 7 else 0
                # guest and guest_nice (fields 9-10) are already in user and nice
                total += sum(ticks[:8])
    return steal, total


class Steal:
    """A sampler of cpus' steal; start() and stop(), then samples: [[t, steal, total]]."""

    def __init__(self, cpus: list[int], every: float = 0.25):
        self.cpus, self.every = cpus, every
        self.samples: list[list[float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            self.samples.append([round(time.monotonic(), 4), *read_ticks(self.cpus)])
            if self._stop.wait(self.every):
                self.samples.append([round(time.monotonic(), 4), *read_ticks(self.cpus)])
                return

    def start(self) -> Steal:
        self._thread.start()
        return self

    def stop(self) -> list[list[float]]:
        self._stop.set()
        self._thread.join()
        return self.samples


def fraction_in(samples: list[list[float]], t0: float, t1: float) -> float:
    """Steal's share of the CPUs' ticks between the samples around [t0, t1]; nan where
    no two samples bound it."""
    before = [s for s in samples if s[0] <= t0]
    after = [s for s in samples if s[0] >= t1]
    if not before or not after:
        return float("nan")
    a, b = before[-1], after[0]
    dt = b[2] - a[2]
    return (b[1] - a[1]) / dt if dt > 0 else float("nan")
