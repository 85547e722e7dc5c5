"""A process's peak RSS, as the tests read it."""

from __future__ import annotations

import subprocess
import time


def peak_mib_until_exit(p: subprocess.Popen, every_s: float = 0.05) -> float:
    """The process's peak RSS (VmHWM, MiB), read until it exits."""
    peak = 0.0
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/status") as f:
                hwm = [ln for ln in f if ln.startswith("VmHWM:")]
            peak = max(peak, int(hwm[0].split()[1]) / 1024) if hwm else peak
        except OSError:
            pass
        time.sleep(every_s)
    return peak
