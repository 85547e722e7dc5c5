"""How long each timeline writer takes, and how large its file is (docs/timeline.md,
"Cost").

A synthetic Timeline: --kernels kernels (default 200 000) of 40 names, from 4
processes on 2 GPUs and 4 streams each, every 10th launch sampled with one of 500
distinct 21-frame stacks (Python and native), graph kernels among them. Each writer
runs --rounds times; the median wall time, the file's size and the process's peak
RSS after each writer are printed.

Usage: .venv/bin/python bench/trace_writers.py [--kernels 200000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "agent"))

from gpu_agent.timeline import write_chrome, write_events, write_perfetto  # noqa: E402
from gpu_agent.probes.devices import GpuDevice  # noqa: E402
from gpu_agent.timeline.model import Frame, KernelEvent, Timeline  # noqa: E402

T0 = 1_760_000_000_000_000_000


def timeline(n: int, seed: int = 1) -> Timeline:
    rnd = random.Random(seed)
    names = [f"void ns::kernel_{i}<float, {i % 7}>(float*, int)" for i in range(40)]
    stacks = {}
    for sid in range(1, 501):
        frames = [Frame(names[sid % 40], "kernel")]
        frames += [Frame(f"native_{sid}_{d}", "native", "libtorch_cuda.so") for d in range(8)]
        frames += [Frame(f"py_{sid}_{d}", "python", f"/app/model_{d}.py", 10 + d) for d in range(12)]
        stacks[sid] = frames
    pids = [1000 + p for p in range(4)]
    kernels, t = [], T0
    for i in range(n):
        pid = pids[i % 4]
        t += rnd.randint(500, 5000)
        sampled = i % 10 == 0
        graph = i % 3 == 0
        kernels.append(
            KernelEvent(
                pid,
                t,
                t + rnd.randint(1000, 50000),
                names[i % 40],
                f"_Z{i % 40}k",
                (i // 4) % 2,
                7 + i % 4,
                0xA0,
                i + 1,
                graph_id=5 if graph else 0,
                graph_node_id=i % 8 if graph else 0,
                grid=(128, 1, 1),
                block=(256, 1, 1),
                stack_id=rnd.randint(1, 500) if sampled else None,
                launch_tid=pid if sampled else None,
                launch_ns=t - 3000 if sampled else None,
            )
        )
    devices = {
        (pid, d): GpuDevice(d, f"GPU-{d:08x}-0000-0000-0000-000000000000", "NVIDIA H100 80GB HBM3")
        for pid in pids
        for d in (0, 1)
    }
    return Timeline(
        host="bench",
        started_ns=T0,
        ended_ns=t + 100_000,
        processes={pid: "python" for pid in pids},
        threads={(pid, pid): "python" for pid in pids},
        devices=devices,
        stacks=stacks,
        kernels=kernels,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kernels", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tl = timeline(args.kernels)
    writers = {
        "ndjson": (write_events, "e.ndjson"),
        "chrome": (write_chrome, "t.json"),
        "perfetto": (write_perfetto, "t.perfetto-trace"),
    }
    with tempfile.TemporaryDirectory() as tmp:
        for label, (write, name) in writers.items():
            path = Path(tmp) / name
            times = []
            for _ in range(args.rounds):
                t0 = time.perf_counter()
                write(tl, path)
                times.append(time.perf_counter() - t0)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"{label:9s} {statistics.median(times):6.2f} s  {os.path.getsize(path) / 2**20:7.1f} MiB  "
                f"peak RSS so far {rss:.0f} MiB  ({args.kernels} kernels, {args.rounds} rounds)"
            )


if __name__ == "__main__":
    main()
