"""Read a fidelity.py profile with Go pprof and compare with the known truth.

Usage: python3 bench/gpu/check_fidelity.py PROFILE STEPS [PPROF]
Prints the add kernel's launches (exact truth: 4 x STEPS) and the share of its
GPU time the agent puts under site_a / site_b / [unsampled] (truth 75 / 25 / 0).
"""

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from pprof_tool import raw  # noqa: E402


def main():
    path, steps = sys.argv[1], int(sys.argv[2])
    samples = [s for s in raw(path) if "add" in s.frames[0].lower() and "elementwise" in s.frames[0]]
    total_ns = sum(s.values[0] for s in samples)
    launches = sum(s.values[1] for s in samples)
    share = {"site_a": 0, "site_b": 0, "[unsampled]": 0, "other": 0}
    for s in samples:
        key = next((k for k in ("site_a", "site_b", "[unsampled]") if any(k in f for f in s.frames)), "other")
        share[key] += s.values[0]
    print(f"add kernel launches: agent {launches}, truth {4 * steps} "
          f"({'exact' if launches == 4 * steps else 'MISMATCH'})")
    for k, v in share.items():
        print(f"  {k:12} {100 * v / max(total_ns, 1):6.2f} %")
    err = max(abs(100 * share['site_a'] / max(total_ns, 1) - 75), abs(100 * share['site_b'] / max(total_ns, 1) - 25))
    print(f"max per-stack share error: {err:.2f} percentage points")


if __name__ == "__main__":
    main()
