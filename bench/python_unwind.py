"""Cost of Python unwinding at a sampled launch.

One agent (a Collector with the real BPF program) watches; every launch is
sampled (GPU_AGENT_SAMPLE_PERIOD=1) so a launch's cost *is* the sampled-launch
cost. For each CPython found and each Python stack depth, bench/py_launch.py
runs twice per round, interleaved:
  native : the agent leaves the process's Python alone (no py_procs entry):
           the BPF program does the native-stack work only;
  python : the agent set the process up: BPF also walks the thread list and
           the frames at every launch.
Reported (medians over rounds):
  * the app's wall ns per launch (Python + ctypes + mock driver + CUPTI mock +
    shim eh_frame unwind + uprobe + BPF);
  * the cuda_correlation BPF program's own run time per call, from the
    kernel's BPF stats (kernel.bpf_stats_enabled, /proc/self/fdinfo of the
    program): the part Python unwinding adds to;
  * the difference python - native, per sampled launch and amortized over the
    default sampling period (64).

Usage (root): .venv/bin/python bench/python_unwind.py [--launches 20000] [--rounds 5]
              [--depths 0,20,60] [--python /path/to/python3 ...]
"""

from __future__ import annotations

import argparse
import glob
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "agent"))

from gpu_agent.join.collector import Collector  # noqa: E402

SHIM = REPO / "build" / "libgpu_agent_shim.so"
WORKLOAD = REPO / "bench" / "py_launch.py"
STATS = "/proc/sys/kernel/bpf_stats_enabled"


def prog_stats(fd: int) -> tuple[int, int]:
    run_ns = cnt = 0
    with open(f"/proc/self/fdinfo/{fd}") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k == "run_time_ns":
                run_ns = int(v)
            elif k == "run_cnt":
                cnt = int(v)
    return run_ns, cnt


def run_one(col: Collector, fd: int, py: str, depth: int, n: int, python_on: bool) -> tuple:
    col.stacks.python.enabled = python_on
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_AGENT_", "CUDA_INJ"))}
    env.update(
        LD_LIBRARY_PATH=str(REPO / "build" / "mock"), GPU_AGENT_SAMPLE_PERIOD="1", CUDA_INJECTION64_PATH=str(SHIM)
    )
    ns0, c0 = prog_stats(fd)
    p = subprocess.Popen([py, str(WORKLOAD), str(depth), str(n)], env=env, stdout=subprocess.PIPE, text=True)
    while p.poll() is None:
        col.poll(50)
    col.poll(10)
    out = p.stdout.read()
    ns1, c1 = prog_stats(fd)
    wall = float(out.split("=")[1])
    bpf = (ns1 - ns0) / max(1, c1 - c0)
    col.drain()
    col.interval.totals.clear()
    col.interval.sampled.clear()
    st = col.counters()
    return wall, bpf, st.get("py_stacks", 0)


def pythons(args) -> list[str]:
    if args.python:
        return args.python
    found = []
    for p in sorted(glob.glob("/root/.pyenv/versions/3.1[0-9]*/bin/python3")):
        if not p.split("/")[-3].endswith("t"):
            found.append(p)
    return found


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--depths", default="0,20,60")
    ap.add_argument("--python", action="append")
    args = ap.parse_args()
    depths = [int(d) for d in args.depths.split(",")]
    pys = pythons(args)
    with open(STATS) as f:
        old_stats = f.read().strip()
    with open(STATS, "w") as f:
        f.write("1")
    col = Collector(str(SHIM))
    col.open()
    try:
        fd = col.session._bpf.funcs[b"ga_cuda_correlation"].fd
        res: dict = {}
        for r in range(args.rounds):
            for py in pys:
                for d in depths:
                    for on in (False, True) if r % 2 == 0 else (True, False):
                        wall, bpf, _ = run_one(col, fd, py, d, args.launches, on)
                        res.setdefault((py, d, on), []).append((wall, bpf))
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        col.close()
        with open(STATS, "w") as f:
            f.write(old_stats)
    ver = {
        py: subprocess.run(
            [py, "-c", "import platform; print(platform.python_version())"], capture_output=True, text=True
        ).stdout.strip()
        for py in pys
    }
    print(
        "| CPython | Python frames | app ns/launch, native | app ns/launch, python | "
        "Δ per sampled launch | BPF ns/call, native | BPF ns/call, python | Δ BPF | "
        "Δ amortized (1/64) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for py in pys:
        for d in depths:
            a = res[(py, d, False)]
            b = res[(py, d, True)]
            wa = statistics.median(x[0] for x in a)
            wb = statistics.median(x[0] for x in b)
            ba = statistics.median(x[1] for x in a)
            bb = statistics.median(x[1] for x in b)
            # frames on the stack: the nest() calls + leaf + main + <module>
            print(
                f"| {ver[py]} | {d + 3} | {wa:.0f} | {wb:.0f} | {wb - wa:+.0f} | {ba:.0f} | "
                f"{bb:.0f} | {bb - ba:+.0f} | {(wb - wa) / 64:+.1f} |"
            )


if __name__ == "__main__":
    main()
