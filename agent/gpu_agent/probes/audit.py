"""The shim's audit file (GPU_AGENT_AUDIT_FILE, shim/src/window.cpp): per kernel, the
full CUPTI trace's launches and GPU ns next to the windowed ones. Only benchmarks
and tests read it; this is its one parser."""

from __future__ import annotations

from pathlib import Path


def audit_rows(paths) -> dict[str, list[int]]:
    """kernel name -> [launches, gpu ns, windowed launches, windowed gpu ns], summed
    over one or several audit files (one per process)."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    rows: dict[str, list[int]] = {}
    for path in paths:
        for line in Path(path).read_text().splitlines():
            if line.startswith(("#", "kernel_id")):
                continue
            _, launches, ns, wl, wns, name = line.split("\t", 5)
            acc = rows.setdefault(name, [0, 0, 0, 0])
            for i, v in enumerate((launches, ns, wl, wns)):
                acc[i] += int(v)
    return rows
