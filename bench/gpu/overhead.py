"""Per-step time of launch-bound PyTorch workloads, for overhead comparisons.

One process measures one (workload, config) pair and prints one JSON line:
  {"workload": ..., "config": ..., "us_per_step": median over repeats}
Configs that need something in-process (torch.profiler) are switched here; the
shim and the agent are configured by the driver (bench/gpu/run_overhead.py).

Workloads (the issue-3 anchors):
  eager : 20 tiny elementwise kernels per step
  mlp   : 6 x (Linear 1024 + GELU), batch 16, fp16
  graph : the same MLP captured with torch.cuda.graph, replayed
  compiled : a torch.compile'd (Inductor/Triton) elementwise chain, 10 calls
             per step (launch-bound Triton kernels)
The driver-API cuGraphLaunch workload is bench/gpu/driver_graph.cu --bench, and
"4 processes sharing the GPU" is run_overhead.py starting four of these at once.
"""

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import torch

from smoke import capture_graph  # same warm-up and capture as the smoke check (this directory)


def make_step(workload):
    torch.manual_seed(0)
    if workload == "compiled":
        @torch.compile
        def fused(a, b):
            return torch.nn.functional.gelu(a * 1.5 + b) * 0.5

        a = torch.randn(4096, device="cuda")
        b = torch.randn(4096, device="cuda")

        def step():
            for _ in range(10):
                fused(a, b)
        return step
    if workload == "eager":
        x = torch.zeros(1024, device="cuda")

        def step():
            for _ in range(20):
                x.add_(1.0)
        return step
    model = torch.nn.Sequential(*[m for _ in range(6) for m in (torch.nn.Linear(1024, 1024), torch.nn.GELU())])
    model = model.cuda().half()
    x = torch.randn(16, 1024, device="cuda", dtype=torch.half)
    if workload == "mlp":
        return lambda: model(x)
    g, _ = capture_graph(model, x)
    return g.replay


BLOCKS: list = []  # per-block (start, µs/step) of a --seconds run (--blocks prints them)


def warm_up(step, steps):
    for _ in range(steps // 4):
        step()
    torch.cuda.synchronize()


def measure(step, steps, repeats, seconds=0.0):
    """Per-step µs after a warm-up. With seconds > 0: blocks of `steps` until that
    much time has passed, and the TIME AVERAGE over all of them (total time / total
    steps). Duty-cycled collection costs something only inside its windows (one
    slot in N), so a median of short repeats would skip the windowed ones and
    understate the cost; the average over many periods is what a job pays.
    Without seconds: the median of `repeats` blocks (the section-3 figures)."""
    warm_up(step, steps)
    if seconds > 0:
        n, t0 = 0, time.perf_counter()
        while True:
            tb = time.perf_counter()
            for _ in range(steps):
                step()
            torch.cuda.synchronize()
            n += steps
            # (CLOCK_MONOTONIC start in s, µs/step): the shim's debug log uses that clock
            BLOCKS.append((round(tb, 3), round((time.perf_counter() - tb) * 1e6 / steps, 2)))
            if time.perf_counter() - t0 >= seconds:
                return (time.perf_counter() - t0) * 1e6 / n
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1e6 / steps)
    return statistics.median(out)


def shim_state():
    """The injected shim's state (1 attached, 0 idle, -1 disabled), or None without
    a shim. dlopen of the path the driver loaded returns that same copy."""
    import ctypes
    import os
    path = os.environ.get("CUDA_INJECTION64_PATH")
    if not path:
        return None
    f = ctypes.CDLL(path).gpu_agent_shim_state
    f.restype = ctypes.c_int
    return f


def measure_ab(step, steps, seconds, on_s, off_s, profiler):
    """In-process A/B (bench/gpu/ab_overhead.py): blocks of `steps` for `seconds`,
    each labelled with the state at its start and end, so that configs are compared
    inside ONE process, over the same minutes, instead of across processes (whose
    speed varies by +-15 % on a shared node). The state is the shim's (attached or
    not; GPU_AGENT_EXP_TOGGLE_MS=ON:OFF makes it alternate), or with `profiler`
    torch.profiler on for on_s and off for off_s, switched here between blocks; with
    neither, that same time phase alone (the noise floor)."""
    state = shim_state()
    prof = None
    warm_up(step, steps)
    out, t0 = [], time.perf_counter()

    def label():
        if state is not None:
            return state()
        if profiler:
            return int(prof is not None)
        return int(phase_on())

    def phase_on():  # the shim's phase: CLOCK_MONOTONIC ms modulo (on + off)
        return time.monotonic() * 1000 % ((on_s + off_s) * 1000) < on_s * 1000

    while time.perf_counter() - t0 < seconds:
        if profiler and not state:
            want = phase_on()
            if want and prof is None:
                from torch.profiler import ProfilerActivity, profile
                prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
                prof.start()
            elif not want and prof is not None:
                prof.stop()
                prof = None
        s0 = label()
        tb = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        te = time.perf_counter()
        out.append((round(time.monotonic() - (te - tb), 4), round((te - tb) * 1e6 / steps, 2), s0, label()))
    if prof is not None:
        prof.stop()
    return out


def thread_cpu_s() -> dict:
    """CPU seconds of this process's threads so far, summed by thread name.

    Why: the injected shim's only work while no agent is attached is its poller
    thread ("ga-shim-poll"); its CPU time over the run bounds what it can take from
    the launching thread, far more precisely than comparing step times across
    processes (bench/gpu/pair_overhead.py)."""
    out: dict = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            task = Path(f"/proc/self/task/{tid}")
            name = (task / "comm").read_text().strip()
            # schedstat's first field: time on a CPU in ns (stat's utime/stime
            # count 10 ms ticks, too coarse for a thread that wakes every 100 ms)
            ns = int((task / "schedstat").read_text().split()[0])
        except OSError:
            continue  # the thread ended meanwhile
        out[name] = round(out.get(name, 0.0) + ns / 1e9, 6)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["eager", "mlp", "graph", "compiled"])
    ap.add_argument("--config", default="baseline")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--blocks", action="store_true", help="also print each block's µs/step")
    ap.add_argument("--seconds", type=float, default=0.0,
                    help="time-average over blocks of --steps for this long (see measure)")
    ap.add_argument("--ab", type=float, default=0.0, metavar="SECONDS",
                    help="in-process A/B for this long: print labelled blocks (see measure_ab)")
    ap.add_argument("--toggle", default="0.4:1.2", metavar="ON:OFF",
                    help="--ab: seconds on, then off (the shim's GPU_AGENT_EXP_TOGGLE_MS)")
    a = ap.parse_args()
    with torch.no_grad():
        step = make_step(a.workload)
        t0, cpu0 = time.monotonic(), thread_cpu_s()  # the measured part only, after set-up
        if a.ab:
            on_s, off_s = (float(x) for x in a.toggle.split(":"))
            blocks = measure_ab(step, a.steps, a.ab, on_s, off_s, a.config == "torch.profiler")
            print(json.dumps({"workload": a.workload, "config": a.config, "steps": a.steps,
                              "blocks": blocks}))
            return
        if a.config == "torch.profiler":
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                us = measure(step, a.steps, a.repeats, a.seconds)
        else:
            us = measure(step, a.steps, a.repeats, a.seconds)
    out = {"workload": a.workload, "config": a.config, "us_per_step": round(us, 2),
           "measured_s": round(time.monotonic() - t0, 3),
           "thread_cpu_s": {k: round(v - cpu0.get(k, 0.0), 6) for k, v in thread_cpu_s().items()},
           "libcupti_mapped": "libcupti" in Path("/proc/self/maps").read_text()}
    if a.blocks:
        out["blocks"] = BLOCKS
    print(json.dumps(out))


if __name__ == "__main__":
    main()
