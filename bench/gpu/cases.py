"""The GPU benchmark's workloads (cases), and the process that times one of them.

Each measurement is one fresh process:
    python -m bench.gpu.cases WORKLOAD [--wait S] [--steps N] [--repeats R]
It builds the workload, waits --wait seconds (so that an agent that is already
running has attached to it and started its windows: "steady state"), warms up,
then times R blocks of N steps and prints one JSON line: the median block in µs
per step, the time average over all blocks, and each block.

Workloads (launch-bound on purpose: the shim's cost is per launch):
  eager     20 tiny elementwise kernels per step
  mlp       6 x (Linear 1024 + GELU), batch 16, fp16
  graph     the same MLP captured with torch.cuda.graph, replayed
  compiled  a torch.compile'd (Inductor/Triton) elementwise chain, 10 calls per step
  driver-graph  cuGraphLaunch of a 12-kernel driver graph (bench/gpu/driver_graph.cu,
                a C program; the runner starts it, not this module)
  mlp-x4    four mlp processes sharing the GPU (the runner starts four of these)
  mlp-x10   ten of them: the agent's memory with many PyTorch processes attached
  launch    an empty kernel launched from C (bench/gpu/launch_loop.cu): the launch
            path alone, so that shim states differ by their ns per launch
  matmul    one 4096 x 4096 fp16 matmul per step: GPU-bound, where a GPU-side cost
            (PC sampling slows kernels while it samples) shows
  sites     one add kernel launched from two call sites, site_a 3 times per step and
            site_b once: the true split of its GPU time is 75 % / 25 % (the
            per-stack share check of python -m bench.gpu fidelity --shares)
  llama     Llama decode: a random-weight 8-layer Llama (hidden 1024, 16 heads, 4 KV
            heads; transformers, nothing downloaded), batch 1, generate() of 32 tokens
            a step

--trace SECONDS times blocks of --steps steps for that long instead, and reports
each block with the shim's state at its end (attached, teardowns so far): the
in-process method of python -m bench.gpu overhead --method inprocess.

--step-log FILE runs steps for --seconds S (else --steps N steps) after --wait and
appends, about every 0.25 s (--log-every), a line `CLOCK_REALTIME_ns steps_done` (the build's
step counted; steps whose launches were issued), the first one (0 steps) just before the
build's step; it prints the counts at the end.
For python -m bench.gpu intervals (bench/gpu/intervals.py), with two more jobs:
  phased    eager and mlp in one process, switching every --phase S seconds; its
            log lines carry one count per case: `ns steps_eager steps_mlp`
  --bursts B,I  busy B seconds, then idle I seconds (lines go on), repeating
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

# Steps per timed block: about 2.4 s each on an H200 (the issue-17 method).
STEPS = {
    "eager": 16000,
    "mlp": 16000,
    "graph": 45000,
    "compiled": 24000,
    "driver-graph": 45000,
    "mlp-x4": 4000,
    "mlp-x10": 2000,
    "sites": 16000,
    "launch": 400000,
    "matmul": 8000,
    "llama": 40,
}
WORKLOADS = list(STEPS)


class TinyMLP:
    """6 x (Linear 1024 + GELU), built lazily so that importing this module needs no torch."""

    @staticmethod
    def build(width=1024, depth=6):
        import torch

        layers = [m for _ in range(depth) for m in (torch.nn.Linear(width, width), torch.nn.GELU())]
        return torch.nn.Sequential(*layers).cuda().half()


def capture_graph(model, x):
    """Warm up on a side stream, then capture one forward pass (torch's recipe)."""
    import torch

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            model(x)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = model(x)
    return g, y


def site_a(x, y):
    for _ in range(3):
        x.add_(y)


def site_b(x, y):
    x.add_(y)


def make_step(workload: str):
    import torch

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
    if workload == "sites":
        x = torch.zeros(4096, device="cuda")
        y = torch.ones(4096, device="cuda")

        def step():
            site_a(x, y)
            site_b(x, y)

        return step
    if workload == "matmul":
        a = torch.randn(4096, 4096, device="cuda", dtype=torch.half)
        b = torch.randn(4096, 4096, device="cuda", dtype=torch.half)
        return lambda: torch.mm(a, b)
    if workload == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        cfg = LlamaConfig(
            vocab_size=32000,
            hidden_size=1024,
            intermediate_size=2816,
            num_hidden_layers=8,
            num_attention_heads=16,
            num_key_value_heads=4,
            max_position_embeddings=512,
        )
        model = LlamaForCausalLM(cfg).cuda().half().eval()
        ids = torch.randint(0, 32000, (1, 16), device="cuda")
        return lambda: model.generate(ids, max_new_tokens=32, min_new_tokens=32, do_sample=False, pad_token_id=0)
    if workload == "eager":
        x = torch.zeros(1024, device="cuda")

        def step():
            for _ in range(20):
                x.add_(1.0)

        return step
    model = TinyMLP.build()
    x = torch.randn(16, 1024, device="cuda", dtype=torch.half)
    if workload in ("mlp", "mlp-x4", "mlp-x10"):
        return lambda: model(x)
    g, _ = capture_graph(model, x)
    return g.replay


def logged_steps(
    steps: list, log_path: str, seconds: float, n: int, wait: float, phase: float, bursts: str, every: float = 0.25
) -> list:
    """--step-log: steps (one function per case, switched every `phase` s) for
    `seconds` (else `n` steps), after `wait` s; a log line about every `every` s."""
    import torch

    counts = [1] * len(steps)  # each was called once when built
    busy, idle = map(float, bursts.split(",")) if bursts else (0.0, 0.0)
    with open(log_path, "a") as log:

        def line():
            log.write(f"{time.time_ns()} {' '.join(map(str, counts))}\n")
            log.flush()

        line()
        time.sleep(wait)
        line()
        t0 = time.monotonic()
        due = t0 + every
        while time.monotonic() - t0 < seconds if seconds else sum(counts) - len(steps) < n:
            now = time.monotonic()
            if busy and (now - t0) % (busy + idle) >= busy:
                time.sleep(0.01)
            else:
                i = int((now - t0) // phase) % len(steps) if phase else 0
                steps[i]()
                counts[i] += 1
            if now >= due:
                line()
                due = now + every
        torch.cuda.synchronize()
        line()
    return counts


def thread_cpu_s() -> dict:
    """CPU seconds of this process's threads so far, summed by thread name (the
    shim's poller is "ga-shim-poll"). schedstat counts ns; stat's ticks are too
    coarse for a thread that wakes every 100 ms."""
    out: dict = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            task = Path(f"/proc/self/task/{tid}")
            name = (task / "comm").read_text().strip()
            ns = int((task / "schedstat").read_text().split()[0])
        except OSError:
            continue
        out[name] = round(out.get(name, 0.0) + ns / 1e9, 6)
    return out


def time_blocks(step, steps: int, repeats: int) -> list[float]:
    import torch

    for _ in range(max(1, steps // 8)):  # warm-up: allocator, cuBLAS heuristics, Triton
        step()
    torch.cuda.synchronize()
    blocks = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        blocks.append((time.perf_counter() - t0) * 1e6 / steps)
    return blocks


class ShimState:
    """The shim's state through its C API (the copy this process mapped), or None."""

    def __init__(self):
        import ctypes

        path = next(
            (
                ln.split()[-1]
                for ln in Path("/proc/self/maps").read_text().splitlines()
                if "gpu_agent_shim" in ln and ln.split()[-1].endswith(".so")
            ),
            None,
        )
        self.lib = ctypes.CDLL(path) if path else None
        if self.lib:
            self.lib.gpu_agent_shim_counter.restype = ctypes.c_uint64
            self.lib.gpu_agent_shim_counter_name.restype = ctypes.c_char_p
            names = {}
            for i in range(256):
                n = self.lib.gpu_agent_shim_counter_name(i)
                if not n:
                    break
                names[n.decode()] = i
            self.teardowns = names.get("teardowns")
            self.windows = names.get("windows")

    def now(self) -> tuple[int, int, int]:
        """(attached 0/1, teardowns so far, windows opened so far)"""
        if not self.lib:
            return 0, 0, 0
        td, win = (self.lib.gpu_agent_shim_counter(i) if i is not None else 0 for i in (self.teardowns, self.windows))
        return int(self.lib.gpu_agent_shim_state() == 1), int(td), int(win)


def trace_blocks(step, steps: int, seconds: float) -> list[list]:
    """Blocks of `steps` steps for `seconds`: [monotonic s at the end, µs per step,
    attached, teardowns so far, windows opened so far, the launching thread's CPU µs
    per step] each. The last tells a slower CPU (more CPU time a step) from a wait
    (the same CPU time, more wall time)."""
    import torch

    for _ in range(max(1, steps // 2)):
        step()
    torch.cuda.synchronize()
    shim, out, end = ShimState(), [], time.monotonic() + seconds
    while time.monotonic() < end:
        t0, c0 = time.perf_counter(), time.thread_time()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        us, cpu_us = (time.perf_counter() - t0) * 1e6 / steps, (time.thread_time() - c0) * 1e6 / steps
        out.append([round(time.monotonic(), 4), round(us, 3), *shim.now(), round(cpu_us, 3)])
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workload", choices=[w for w in WORKLOADS if w not in ("driver-graph", "launch")] + ["phased"])
    ap.add_argument("--steps", type=int, default=0, help="steps per block (default: the table)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--wait", type=float, default=3.0, help="seconds between building the workload and timing it")
    ap.add_argument(
        "--torch-profiler", action="store_true", help="time it under torch.profiler (CPU + CUDA activities)"
    )
    ap.add_argument(
        "--trace",
        type=float,
        default=0,
        metavar="SECONDS",
        help="time blocks of --steps steps for SECONDS, each with the shim's state",
    )
    ap.add_argument("--step-log", default="", metavar="FILE", help="log steps done to FILE (see above)")
    ap.add_argument("--seconds", type=float, default=0, help="--step-log: run for this long instead of --steps")
    ap.add_argument("--phase", type=float, default=30.0, help="phased: seconds of each case in turn")
    ap.add_argument("--log-every", type=float, default=0.25, metavar="S", help="--step-log: a line every S s")
    ap.add_argument("--bursts", default="", metavar="BUSY,IDLE", help="--step-log: busy, then idle, seconds")
    a = ap.parse_args(argv)
    if a.workload == "phased" and not a.step_log:
        ap.error("phased runs with --step-log only")
    import torch

    with torch.no_grad():
        steps = [make_step(w) for w in (["eager", "mlp"] if a.workload == "phased" else [a.workload])]
        if a.step_log:  # no step yet: the first calls' launches lie after this line, not from the start
            with open(a.step_log, "a") as log:
                log.write(f"{time.time_ns()} {' '.join('0' * len(steps))}\n")
        for step in steps:
            step()
        torch.cuda.synchronize()
        if a.step_log:
            counts = logged_steps(steps, a.step_log, a.seconds, a.steps, a.wait, a.phase, a.bursts, a.log_every)
            print(json.dumps({"workload": a.workload, "steps": counts}), flush=True)
            return
        if a.trace:
            print(json.dumps({"workload": a.workload, "steps": a.steps, "ready": time.monotonic()}), flush=True)
            trace = trace_blocks(step, a.steps or max(1, STEPS[a.workload] // 40), a.trace)
            print(json.dumps({"workload": a.workload, "trace": trace}), flush=True)
            return
        time.sleep(a.wait)
        cpu0, t0 = thread_cpu_s(), time.monotonic()  # the warm-up's first launch follows
        steps = a.steps or STEPS[a.workload]
        if a.torch_profiler:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]):
                blocks = time_blocks(step, steps, a.repeats)
        else:
            blocks = time_blocks(step, steps, a.repeats)
    t_end = time.monotonic()  # after the last block's synchronize
    wall = t_end - t0
    print(
        json.dumps(
            {
                "workload": a.workload,
                "steps": steps,
                "monotonic_s": [round(t0, 6), round(t_end, 6)],
                "us_per_step": round(statistics.median(blocks), 3),
                "us_mean": round(statistics.fmean(blocks), 3),
                "blocks": [round(b, 3) for b in blocks],
                "thread_cpu_pct": {
                    k: round(100 * (v - cpu0.get(k, 0.0)) / wall, 3)
                    for k, v in thread_cpu_s().items()
                    if v - cpu0.get(k, 0.0) > 0
                },
                "shim_mapped": "gpu_agent_shim" in Path("/proc/self/maps").read_text(),
            }
        )
    )
    sys.stdout.flush()


if __name__ == "__main__":
    main()
