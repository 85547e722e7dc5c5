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
import statistics
import time

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


def measure(step, steps, repeats, seconds=0.0):
    """Per-step µs after a warm-up. With seconds > 0: blocks of `steps` until that
    much time has passed, and the TIME AVERAGE over all of them (total time / total
    steps). Duty-cycled collection costs something only inside its windows (one
    slot in N), so a median of short repeats would skip the windowed ones and
    understate the cost; the average over many periods is what a job pays.
    Without seconds: the median of `repeats` blocks (the section-3 figures)."""
    for _ in range(steps // 4):
        step()
    torch.cuda.synchronize()
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("workload", choices=["eager", "mlp", "graph", "compiled"])
    ap.add_argument("--config", default="baseline")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--blocks", action="store_true", help="also print each block's µs/step")
    ap.add_argument("--seconds", type=float, default=0.0,
                    help="time-average over blocks of --steps for this long (see measure)")
    a = ap.parse_args()
    with torch.no_grad():
        step = make_step(a.workload)
        if a.config == "torch.profiler":
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                us = measure(step, a.steps, a.repeats, a.seconds)
        else:
            us = measure(step, a.steps, a.repeats, a.seconds)
    out = {"workload": a.workload, "config": a.config, "us_per_step": round(us, 2)}
    if a.blocks:
        out["blocks"] = BLOCKS
    print(json.dumps(out))


if __name__ == "__main__":
    main()
