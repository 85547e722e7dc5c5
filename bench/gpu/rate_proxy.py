"""What tracks a launch-bound job's launch rate between count phases?

python -m bench.gpu rateproxy (issue 42): on an H200 the period lines of
`intervals --periods` showed eager, MLP and Llama decode switching between launch
rates about 30 % apart from one second to the next (eager 105-150 k launches/s), so
one 100 ms count phase a period read its period's launches with a median error of
4-8 % and a 90th percentile of 15-32 %. A count that kept going between windows
without CUPTI's callbacks would follow those switches. Candidates, read by the
launching thread itself, with no cost per launch:
  cpu     its CPU time (CLOCK_THREAD_CPUTIME_ID): follows a thread that waits for a CPU
  instr   its user-space instructions retired (perf_event_open, the PMU; -1 if none)
  cycles  its user-space CPU cycles (the same)
Each is set against the truth (the steps the loop made) as the estimator would use
it: periods of --period s in slots of --slot s, one random slot a period counting
launches; the rest of the period at the count slot's launches per unit of the
candidate ("const": per second, what the shim does now).

  python -m bench.gpu.rate_proxy WORKLOAD --seconds S --out FILE
runs one process (bench/gpu/cases.py's workload) and writes, every --every s, a line
`monotonic_ns steps thread_cpu_ns runqueue_wait_ns instructions cycles cpu`.
"""

from __future__ import annotations

import ctypes
import os
import random
import statistics
import struct
import sys
import time

PERF_TYPE_HARDWARE, CYCLES, INSTRUCTIONS = 0, 0, 1
EXCLUDE_KERNEL, EXCLUDE_HV = 1 << 5, 1 << 6
SYS_PERF_EVENT_OPEN = 298  # x86_64


def perf_counter_fd(config: int) -> int:
    """A counting perf event of this thread's user-space `config`; -1 where the PMU
    (or the permission) is missing."""
    attr = bytearray(128)
    struct.pack_into("IIQ", attr, 0, PERF_TYPE_HARDWARE, len(attr), config)
    struct.pack_into("Q", attr, 40, EXCLUDE_KERNEL | EXCLUDE_HV)  # flags, after read_format
    libc = ctypes.CDLL(None, use_errno=True)
    buf = ctypes.create_string_buffer(bytes(attr), len(attr))
    fd = libc.syscall(SYS_PERF_EVENT_OPEN, buf, 0, -1, -1, 0)  # this thread, any CPU
    return fd if fd >= 0 else -1


def read_count(fd: int) -> int:
    return struct.unpack("Q", os.read(fd, 8))[0] if fd >= 0 else -1


def run(workload: str, seconds: float, out: str, every: float) -> None:
    import torch

    from bench.gpu.cases import make_step

    libc = ctypes.CDLL(None)
    with torch.no_grad():
        step = make_step(workload)
        step()
        torch.cuda.synchronize()
        fds = [perf_counter_fd(INSTRUCTIONS), perf_counter_fd(CYCLES)]
        sched = open("/proc/thread-self/schedstat", "rb", buffering=0)
        n, lines = 0, []

        def line() -> None:
            sched.seek(0)
            wait = int(sched.read().split()[1])
            cpu_ns = time.clock_gettime_ns(time.CLOCK_THREAD_CPUTIME_ID)
            lines.append(
                f"{time.monotonic_ns()} {n} {cpu_ns} {wait} {read_count(fds[0])} {read_count(fds[1])} "
                f"{libc.sched_getcpu()}"
            )

        t0 = time.monotonic()
        due = t0
        while (now := time.monotonic()) - t0 < seconds:
            step()
            n += 1
            if now >= due:
                line()
                due = now + every
        torch.cuda.synchronize()
        line()
    with open(out, "w") as f:
        f.write("\n".join(lines) + "\n")


def read_rows(text: str) -> list[list[int]]:
    return [list(map(int, ln.split())) for ln in text.splitlines() if len(ln.split()) == 7]


PROXIES = {"const": 0, "cpu": 2, "instr": 4, "cycles": 5}  # column of each (0: time itself)


def simulate(rows: list[list[int]], launches_per_step: float, period: float, slot: float, seed: int = 1) -> dict:
    """Periods of `period` s over the log, each with one count slot at random: each
    proxy's estimate of the period's launches against the steps made. Per proxy:
    |error| median / 90th pct / bias over periods, and over 10 s intervals made of
    whole periods."""
    rng = random.Random(seed)
    t = [r[0] / 1e9 for r in rows]

    def at(col: int, x: float) -> float:  # linear between lines
        import bisect

        i = min(max(1, bisect.bisect_left(t, x)), len(t) - 1)
        f = (x - t[i - 1]) / ((t[i] - t[i - 1]) or 1e-9)
        return rows[i - 1][col] + f * (rows[i][col] - rows[i - 1][col])

    def d(col: int, a: float, b: float) -> float:
        return (b - a) if col == 0 else at(col, b) - at(col, a)

    cols = {k: c for k, c in PROXIES.items() if c == 0 or all(r[c] >= 0 for r in rows)}
    slots = max(2, round(period / slot))
    per: dict[str, list] = {k: [] for k in cols}
    p0 = t[0] + 1.0
    while p0 + slots * slot <= t[-1]:
        k = rng.randrange(slots)
        c0, c1, p1 = p0 + k * slot, p0 + (k + 1) * slot, p0 + slots * slot
        true = d(1, p0, p1) * launches_per_step
        counted = d(1, c0, c1) * launches_per_step
        for name, col in cols.items():
            unit = d(col, c0, c1)
            rest = d(col, p0, c0) + d(col, c1, p1)
            est = counted + (counted / unit * rest if unit > 0 else 0)
            per[name].append((p0, est, true))
        p0 = p1
    out = {}
    for name, ps in per.items():
        errs = [100 * (e / tr - 1) for _, e, tr in ps if tr > 0]
        ivs: dict[int, list[float]] = {}
        for p, e, tr in ps:
            acc = ivs.setdefault(int((p - t[0]) // 10), [0.0, 0.0])
            acc[0] += e
            acc[1] += tr
        ierrs = [100 * (e / tr - 1) for e, tr in ivs.values() if tr > 0]
        out[name] = {"periods": spread(errs), "intervals": spread(ierrs), "n": [len(errs), len(ierrs)]}
    return out


def spread(errs: list[float]) -> dict:
    a = sorted(abs(x) for x in errs)
    if not a:
        return {}
    return {"median": statistics.median(a), "p90": a[max(0, -(-9 * len(a) // 10) - 1)], "bias": statistics.median(errs)}


SETTINGS = ((1.5, 0.1), (2.5, 0.1), (2.5, 0.25))  # (period, slot) s: the budget's eager and Llama periods


def bench(a) -> None:
    """python -m bench.gpu rateproxy: each workload in a process of its own, with no
    shim, then (--agent) with the shim injected under one `gpu-agent run`; each log
    simulated at SETTINGS; a JSON line per process (its log kept) to --jsonl."""
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    from bench.gpu.harness import Agent, clean_env, shim_env

    with tempfile.TemporaryDirectory() as tmp:
        agent = None
        for mode in ("plain", "agent") if a.agent else ("plain",):
            if mode == "agent":
                agent = Agent(str(Path(tmp) / "run"))
            for w in a.workloads.split(","):
                log = Path(tmp) / f"{w}-{mode}.log"
                cmd = [sys.executable, "-m", "bench.gpu.rate_proxy", w, "--seconds", f"{a.seconds:g}"]
                cmd += ["--out", str(log)]
                env = shim_env() if mode == "agent" else clean_env()
                p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=a.seconds + 300)
                if p.returncode != 0:
                    print(f"{w} ({mode}) failed: {p.stderr[-1500:]}", flush=True)
                    continue
                rows = read_rows(log.read_text())
                res = {f"{pe:g}s/{sl:g}s": simulate(rows, 1.0, pe, sl) for pe, sl in SETTINGS}
                pmu = rows[0][4] >= 0
                print(f"== {w} ({mode}): {len(rows)} lines, {rows[-1][1]} steps, PMU {'yes' if pmu else 'no'}")
                for k, r in res.items():
                    for name, v in r.items():
                        pp, ii = v["periods"], v["intervals"]
                        print(
                            f"   {k:10s} {name:6s} periods {pp['median']:5.2f} / {pp['p90']:5.2f} % (bias "
                            f"{pp['bias']:+5.2f}); 10 s {ii['median']:5.2f} / {ii['p90']:5.2f} % (n {v['n'][1]})",
                            flush=True,
                        )
                with open(a.jsonl, "a") as f:
                    f.write(json.dumps({"bench": "rateproxy", "workload": w, "mode": mode, "sim": res, "rows": rows}))
                    f.write("\n")
        if agent:
            agent.stop()


def main(argv=None) -> None:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("workload")
    ap.add_argument("--seconds", type=float, default=45.0)
    ap.add_argument("--every", type=float, default=0.02, help="a line every S s")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    run(a.workload, a.seconds, a.out, a.every)


if __name__ == "__main__":
    sys.exit(main())
