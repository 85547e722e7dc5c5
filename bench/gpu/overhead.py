"""What the agent costs a job, measured as a user measures it: the job's own step
time, with and without the agent, in separate processes (python -m bench.gpu overhead).

Method (issue 17): every measurement is a fresh process of a case
(bench/gpu/cases.py) pinned to the same CPUs. It waits --wait seconds after
building its workload, so that the agent has attached and is at steady state,
then times --repeats blocks and reports the median block.
  - The no-agent configs (baseline, shim, torch.profiler) run first, with no
    agent anywhere.
  - Then ONE `gpu-agent run` starts at its defaults, pinned to other CPUs, and the
    agent configs run interleaved with the baseline: the baseline loads no shim,
    so the agent cannot touch it. Each config is compared with the baseline of
    its own phase and round.
  - --method sep shuffles the configs within each round; --method pair runs a
    baseline right before every other config, so that each ratio is taken
    between neighbours in time; --method side runs a baseline process beside
    every other config's, at the same time, each on half of --cpus; with
    --trace-seconds each times thousands of short blocks, whose mean (throughput)
    and median are both reported.
The table gives, per config, the median µs per step, the ratio of means against
the baseline, and the median of per-round ratios with a bootstrap 95 % interval.
Diagnostic configs switch one part of the shim off (see CONFIGS), so their
differences from "agent" break the cost down.

--method timeline is the breakdown inside ONE process: the `launch` case
launches an empty kernel for --seconds while an agent starts, watches for 60 %
of the time left, and stops; the launch loop reports its ns per launch every 5 ms. Per config, the
mean before the agent attached, while attached (inside and between windows,
where the shim logs them: GPU_AGENT_DUTY_CYCLE >= 100), and after it left.

--method residual needs no shim and no agent: bench/gpu/cupti_residual.cu switches
CUPTI kernel activity on and off in one of several ways (RESIDUAL_MODES), one
process per mode and round, and reports ns per launch before, while on, after, and
after for a kernel never launched while on: which way, if any, leaves no cost.

--method events needs no shim and no agent either: bench/gpu/event_timing.cu asks
whether CUDA events could time kernels instead of kernel activity: what brackets
of two events cost per launch (with and without a gate that keeps the CPU's launch
time out of them), how close their durations come to CUPTI's, and what an empty
CUPTI launch callback costs. One process per round.
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from bench.gpu.cases import STEPS
from bench.gpu.harness import Agent, case_command, clean_env, cuda_binary, needs_bench_shim, parcagpu_env, shim_env
from bench.gpu.steal import Steal, fraction_in

# config -> (needs the agent, the workload's environment, extra case args)
CONFIGS = {
    "baseline": (None, {}, ()),
    "shim": (False, {"shim": "1"}, ()),
    # a second baseline: side by side, its pairs read the design's own spread (A/A)
    "null": (False, {}, ()),
    # the same with the agent running beside them (neither process has the shim): does
    # the agent's presence on the host, not its profiling, move a process?
    "null-agent": (True, {}, ()),
    "torch.profiler": (False, {}, ("--torch-profiler",)),
    "agent": (True, {"shim": "1"}, ()),
    # the peers: parcagpu as Parca users inject it, loaded alone (its probes' semaphore
    # off: what it costs while no agent reads it) and read by `gpu-agent run`, which
    # consumes its probes as Parca's agent does (docs/parcagpu.md)
    "parcagpu": (False, {"parcagpu": "1"}, ()),
    "parcagpu-agent": (True, {"parcagpu": "1"}, ()),
    # opt-in PC sampling with stall reasons, in the same windows
    "agent-pcs": (True, {"shim": "1", "GPU_AGENT_PC_SAMPLING": "1"}, ()),
    "agent-pcs-e10": (True, {"shim": "1", "GPU_AGENT_PC_SAMPLING": "1", "GPU_AGENT_PC_SAMPLING_EVERY": "10"}, ()),
    # diagnostic: PC sampling enabled (and kernel activity held on), sampling in the first window only
    "agent-pcs-idle": (True, {"shim": "1", "GPU_AGENT_PC_SAMPLING": "1", "GPU_AGENT_PC_SAMPLING_EVERY": "100000"}, ()),
    # diagnostics (their estimates are wrong or absent; they only break the cost down)
    "agent-idle": (True, {"shim": "1", "GPU_AGENT_DUTY_CYCLE": "100000"}, ()),
    "agent-nocounter": (True, {"shim": "1", "GPU_AGENT_LAUNCH_COUNTER": "0"}, ()),
    # the shim's cost budget at 1 % (the default is 2 %): half the windows
    "agent-budget1": (True, {"shim": "1", "GPU_AGENT_OVERHEAD_BUDGET": "1"}, ()),
    # CUPTI subscribed again only at the count phase's edge (the benchmark build), not
    # right after each teardown: nothing of CUPTI between windows (graph capture stacks
    # made there are lost). The subscription costs MLP +0.55 % [-1.15, +2.15] in one
    # process (bench.gpu subcost, H200, docs/benchmarks.md): the defaults keep it
    "agent-late": (True, {"shim": "1", "GPU_AGENT_EXP_SUBSCRIBE": "late"}, ()),
    # the defaults in the same benchmark build (subscribed right after each teardown), so
    # that the two run interleaved under one agent, round by round
    "agent-poller": (True, {"shim": "1", "GPU_AGENT_EXP_SUBSCRIBE": "poller"}, ()),
    "agent-nostacks": (True, {"shim": "1", "GPU_AGENT_SAMPLE_PERIOD": "1000000000"}, ()),
    "agent-cbwindowed": (True, {"shim": "1", "GPU_AGENT_EXP_CALLBACKS": "windowed"}, ()),
    "agent-continuous": (True, {"shim": "1", "GPU_AGENT_DUTY_CYCLE": "1"}, ()),
    "agent-idle-nocb": (
        True,
        {"shim": "1", "GPU_AGENT_DUTY_CYCLE": "100000", "GPU_AGENT_EXP_CALLBACKS": "windowed"},
        (),
    ),
    "agent-hold-activity": (True, {"shim": "1", "GPU_AGENT_EXP_HOLD": "activity"}, ()),
    # one 20 ms window in 2 s: the shim logs each, so a timeline tells in from out
    "agent-d100": (True, {"shim": "1", "GPU_AGENT_DUTY_CYCLE": "100"}, ()),
    "agent-d100-cbwindowed": (
        True,
        {"shim": "1", "GPU_AGENT_DUTY_CYCLE": "100", "GPU_AGENT_EXP_CALLBACKS": "windowed"},
        (),
    ),
}


def env_of(config: str) -> dict:
    extra = dict(CONFIGS[config][1])
    if extra.pop("parcagpu", None):
        return parcagpu_env(**extra)
    return (
        shim_env(**{k: v for k, v in extra.items() if k != "shim"}) if extra.pop("shim", None) else clean_env(**extra)
    )


def cpu_list(spec: str) -> list[str]:
    out: list[str] = []
    for part in filter(None, spec.split(",")):
        lo, _, hi = part.partition("-")
        out += [str(c) for c in range(int(lo), int(hi or lo) + 1)]
    return out


def cpu_groups(spec: str, n: int) -> list[str]:
    """--cpus split into n equal groups, one a process (the whole spec for one)."""
    if n == 1:
        return [spec]
    cpus = cpu_list(spec)
    if len(cpus) < n:
        raise SystemExit(f"--cpus: {n} processes need {n} CPUs or more")
    k = len(cpus) // n
    return [",".join(cpus[i * k : (i + 1) * k]) for i in range(n)]


def one(a, workload: str, config: str) -> dict:
    """One measurement: a fresh process (N at once for mlp-xN, their mean)."""
    return finish(workload, config, start(a, workload, config))


def start(a, workload: str, config: str, cpus_spec: str = "", gpu: str = "") -> list:
    """The measurement's processes, started (pinned to cpus_spec, or to --cpus; on the
    GPU of that ordinal where gpu is given: CUDA_VISIBLE_DEVICES)."""
    spec = cpus_spec or a.cpus
    n = int(workload.split("-x")[1]) if "-x" in workload else 1
    groups = cpu_groups(spec, n) if spec else []
    cmd = case_command(
        workload.split("-x")[0] if n > 1 else workload,
        steps=int(a.scale * STEPS[workload]),
        repeats=a.repeats,
        wait=a.wait,
        torch_profiler=config == "torch.profiler",
    )
    env = env_of(config)
    if gpu:
        env["CUDA_VISIBLE_DEVICES"] = gpu
    if getattr(a, "trace_seconds", 0):
        # blocks for that long, each with the shim's state (cases.py --trace); the shim's
        # window and budget lines, where it is loaded
        steps = max(1, int(a.scale * STEPS[workload]) // 40)
        cmd = case_command(workload.split("-x")[0], steps=steps) + ["--trace", str(a.trace_seconds)]
        if "CUDA_INJECTION64_PATH" in env:
            env["GPU_AGENT_DEBUG"] = "2"  # and each period's line, with the plan's costs
    procs = []
    for i in range(n):
        pin = ["taskset", "-c", groups[i]] if groups else []
        procs.append(subprocess.Popen(pin + cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def levels(us: list[float]) -> dict:
    """A process's fast level (its 10th-percentile block, µs a step) and its share of
    blocks over 15 % slower than its 5th percentile."""
    ranked = sorted(us)
    return {
        "us_fast": ranked[len(ranked) // 10],
        "slow_share": sum(v > 1.15 * ranked[len(ranked) // 20] for v in us) / len(us),
    }


def finish(workload: str, config: str, procs: list, skip_s: float = 0.0) -> dict:
    """The processes' results; a --trace process's µs per step is the median of its
    blocks from skip_s after it was ready, and its trace and shim lines are kept."""
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=900)
        if p.returncode != 0:
            raise SystemExit(f"{workload}/{config} failed: {err[-2000:]}")
        lines = [json.loads(ln) for ln in out.strip().splitlines() if ln.startswith("{")]
        o = lines[-1]
        if "trace" in o:
            ready = next((ln["ready"] for ln in lines if "ready" in ln), o["trace"][0][0])
            kept = [b[1] for b in o["trace"] if b[0] >= ready + skip_s]
            o["us_per_step"] = statistics.median(kept)
            o["us_mean"] = statistics.fmean(kept)  # throughput: every block weighs its time
            # The H200 VMs' CPUs run at two speeds: a lone MLP process, no shim, no agent,
            # no other GPU process, spent 23-39 % of its blocks 15-50 % slower, its thread's
            # CPU time a step rising with its wall time (docs/benchmarks.md). Its fast
            # level (the 10th percentile block) and its share of slow blocks, apart:
            o.update(levels(kept), skip_s=skip_s)
            o["ready"] = ready
            o["shim_lines"] = [ln for ln in err.splitlines() if ln.startswith("gpu-agent-shim")][-2000:]
        outs.append(o)
    rec = {
        "workload": workload,
        "config": config,
        "us_per_step": statistics.fmean(o["us_per_step"] for o in outs),
        "blocks": [o.get("blocks") for o in outs],
    }
    for key in ("us_mean", "us_fast", "slow_share", "skip_s"):
        if all(key in o for o in outs):
            rec[key] = statistics.fmean(o[key] for o in outs)
    for key in ("trace", "ready", "shim_lines"):
        if key in outs[0]:
            rec[key] = outs[0][key]
    poller = [o.get("thread_cpu_pct", {}).get("ga-shim-poll") for o in outs]
    if any(poller):
        rec["poller_cpu_pct"] = max(filter(None, poller))
    return rec


def run(a) -> None:
    workloads, configs = a.workloads.split(","), a.configs.split(",")
    unknown = [c for c in configs if c not in CONFIGS]
    if unknown:
        raise SystemExit(f"unknown config(s): {', '.join(unknown)}; known: {', '.join(CONFIGS)}")
    bench = {c for c in configs if needs_bench_shim(CONFIGS[c][1])}
    phases = [
        ("no-agent", [c for c in configs if CONFIGS[c][0] is False]),
        ("agent", [c for c in configs if CONFIGS[c][0] and c not in bench]),
        ("agent-bench", [c for c in configs if CONFIGS[c][0] and c in bench]),
    ]
    out = open(a.jsonl, "a")
    for phase, todo in phases:
        if not todo:
            continue
        agent = (
            Agent(tempfile.mkdtemp(prefix="gpu-agent-bench-"), cpus=a.agent_cpus, bench_shim=phase == "agent-bench")
            if phase != "no-agent"
            else None
        )
        try:
            if agent:
                time.sleep(a.agent_settle)
            for r in range(a.rounds):
                for w in workloads:
                    order = [c for c in todo if not (w == "driver-graph" and c == "torch.profiler")]
                    random.shuffle(order)
                    if a.method == "side":  # each with its baseline beside it
                        seq = order
                    elif a.method == "pair":
                        seq = [x for c in order for x in ("baseline", c)]
                    else:
                        seq = random.sample(order + ["baseline"], len(order) + 1)
                    for c in seq:
                        t0, c0 = time.monotonic(), agent.cpu_s() if agent else 0.0
                        if a.method == "side":
                            recs = side(a, w, c, r)
                        else:
                            recs = [one(a, w, c)]
                            recs[0]["round"] = f"{a.tag}{r}"
                        for rec in recs:
                            rec.update(phase=phase, method=a.method)
                            if agent:
                                rec["agent_cpu_pct"] = round(100 * (agent.cpu_s() - c0) / (time.monotonic() - t0), 2)
                                rec["agent_rss_mib"], rec["agent_peak_mib"] = agent.rss_mib()
                            out.write(json.dumps(rec) + "\n")
                            out.flush()
                            print(
                                f"{phase:8} round {rec['round']} {w:12} {rec['config']:18} "
                                f"{rec['us_per_step']:9.2f} µs/step"
                                + (
                                    f"  agent {rec['agent_cpu_pct']:.1f} % CPU, {rec['agent_rss_mib']:.0f} MiB"
                                    if agent
                                    else ""
                                ),
                                file=sys.stderr,
                                flush=True,
                            )
        finally:
            if agent:
                tail = agent.stop()
                if a.verbose:
                    print(tail, file=sys.stderr)


class Swapper(threading.Thread):
    """--swap-s: the two sides of a pair trade CPU groups every `every` seconds, every
    thread of each process moved (sched_setaffinity on /proc/PID/task/*). On the H200
    VMs a CPU has slow stretches of seconds (docs/benchmarks.md), which pinned pairs
    read as one side's cost; traded, each side spends half of every stretch on each
    group, so a stretch slows both."""

    def __init__(self, sides: list[list], groups: list[list[str]], every: float):
        super().__init__(daemon=True)
        self.sides, self.groups, self.every = sides, groups, every
        self.swaps, self.done = 0, threading.Event()
        self.start()

    def place(self, flip: int) -> None:
        for s, procs in enumerate(self.sides):
            for i, p in enumerate(procs):
                cpus = {int(c) for c in self.groups[(s + flip) % 2][i].split(",")}
                try:
                    tids = os.listdir(f"/proc/{p.pid}/task")
                except FileNotFoundError:
                    continue
                for tid in tids:
                    try:
                        os.sched_setaffinity(int(tid), cpus)
                    except OSError:
                        pass  # the thread ended

    def run(self) -> None:
        while not self.done.wait(self.every):
            self.swaps += 1
            self.place(self.swaps % 2)

    def stop(self) -> None:
        self.done.set()
        self.join()


def side(a, workload: str, config: str, r: int) -> list[dict]:
    """--method side: the config's process and a baseline process at the same time, on
    the two halves of --cpus (which half takes which drawn at random), one GPU, or with
    --gpus each on its own (drawn at random too); a workload of N processes (mlp-x4) is
    N on each side (with --gpus, each side on its own GPU). A pair's ratio is its round's. On one
    H200 the two processes' contexts shared the GPU unevenly: each spent 26-75 % of its
    blocks 15 % or more slower than its own fast level, so a pair moved by ±20 points
    whatever it ran (docs/benchmarks.md); two GPUs of one host keep the pair's common
    host and drop that. With --trace-seconds each process times blocks for
    that long instead (with the shim's state, and its window lines kept), from --wait
    seconds on: on an H200, processes had slow stretches of seconds of their own (not
    the host's: the process beside did not), which five 1.2 s blocks left at ±30
    points a pair and a minute of 25 ms blocks at ±3 (docs/benchmarks.md). With
    --swap-s the two sides trade CPU groups that often (Swapper): a CPU's slow stretch
    then falls on both, and the A/A pairs spread −4.0 to +0.4 % instead of −12 to +7."""
    cpus = cpu_list(a.cpus)
    n = int(workload.split("-x")[1]) if "-x" in workload else 1
    if len(cpus) < 2 * n:
        raise SystemExit(f"--method side needs {2 * n} CPUs or more in --cpus (one a process, two sides)")
    # A workload of N processes on one GPU: both sides' 2N processes share it, as the
    # one-process workloads' two do (the issue's "4 x MLP on one GPU", both sides at once).
    halves = [",".join(cpus[: len(cpus) // 2]), ",".join(cpus[len(cpus) // 2 :])]
    random.shuffle(halves)
    # each half's steal (bench/gpu/steal.py): the host's share of those CPUs over time
    steal = {h: Steal([int(c) for c in h.split(",")]).start() for h in halves}
    gpus = [g for g in getattr(a, "gpus", "").split(",") if g] or ["", ""]
    if len(gpus) != 2:
        raise SystemExit("--gpus: two GPU ordinals, e.g. 0,1")
    random.shuffle(gpus)
    procs = {c: start(a, workload, c, half, g) for c, half, g in zip(("baseline", config), halves, gpus)}
    swapper = Swapper(list(procs.values()), [cpu_groups(h, n) for h in halves], a.swap_s) if a.swap_s else None
    recs = []
    for c, half, g in zip(("baseline", config), halves, gpus):
        rec = finish(workload, c, procs[c], a.wait)
        rec.update(round=f"{a.tag}{r}-{config}", cpus=half, gpu=g)
        recs.append(rec)
    if swapper:
        swapper.stop()
    for rec in recs:
        rec["swaps"] = swapper.swaps if swapper else 0
        samples = steal[rec["cpus"]].stop()
        rec["steal"] = samples
        if "trace" in rec:
            t0 = rec.get("ready", rec["trace"][0][0]) + a.wait
            rec["steal_pct"] = round(100 * fraction_in(samples, t0, rec["trace"][-1][0]), 3)
    return recs


def timeline(a) -> None:
    """See the module's doc: --method timeline."""
    out = open(a.jsonl, "a")
    for config in a.configs.split(","):
        if not CONFIGS[config][0]:
            continue
        env = env_of(config)
        env["GPU_AGENT_DEBUG"] = "1"  # the window lines
        secs = a.seconds
        loop = subprocess.Popen(
            ["taskset", "-c", a.cpus or "2", cuda_binary("launch_loop"), "0", "--trace", str(secs)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        t_start = time.monotonic()
        time.sleep(1)
        agent = Agent(
            tempfile.mkdtemp(prefix="gpu-agent-bench-"),
            cpus=a.agent_cpus,
            bench_shim=needs_bench_shim(CONFIGS[config][1]),
        )
        t_watch = time.monotonic()
        time.sleep(max(2.0, (t_start + secs - t_watch) * 0.6))
        agent.stop()
        t_stop = time.monotonic()
        stdout, stderr = loop.communicate(timeout=secs + 120)
        trace = json.loads(stdout.strip().splitlines()[-1])["trace"]
        wins = [float(m) for m in re.findall(r"window opened at ([\d.]+) s", stderr)]
        win_s = int(env.get("GPU_AGENT_WINDOW_MS", "20")) / 1000

        def mean(lo, hi, where=lambda t: True):
            v = [ns for t, ns in trace if lo <= t < hi and where(t)]
            return (statistics.fmean(v), len(v)) if v else (float("nan"), 0)

        def in_window(t):
            return any(w <= t < w + win_s for w in wins)

        rec = {
            "method": "timeline",
            "config": config,
            "workload": "launch",
            "before": mean(t_start + 0.5, t_watch),
            "attached": mean(t_watch + 1, t_stop),
            "after": mean(t_stop + 1, t_start + secs),
        }
        if wins:
            rec["in_window"] = mean(t_watch + 1, t_stop, in_window)
            rec["between_windows"] = mean(t_watch + 1, t_stop, lambda t: not in_window(t))
        out.write(json.dumps(rec) + "\n")
        out.flush()
        print(
            f"timeline {config:18} ns/launch: "
            + ", ".join(f"{k} {v[0]:.0f} (n={v[1]})" for k, v in rec.items() if isinstance(v, tuple)),
            flush=True,
        )


RESIDUAL_MODES = ("none", "global", "context", "kernel", "latency0", "hwtrace", "finalize")


def residual(a) -> None:
    """--method residual: bench/gpu/cupti_residual.cu, one process per mode and round
    (no shim, no agent): ns per launch before CUPTI kernel activity, while on, and
    after it was switched off, by the way it was switched."""
    binary = cuda_binary("cupti_residual", cupti=True)
    out = open(a.jsonl, "a")
    for r in range(a.rounds):
        for mode in RESIDUAL_MODES:
            p = subprocess.run(
                ["taskset", "-c", a.cpus or "2", binary, mode],
                env=clean_env(),
                capture_output=True,
                text=True,
                timeout=300,
            )
            line = (p.stdout.strip().splitlines() or [""])[-1]
            try:
                rec = json.loads(line)
            except ValueError:
                rec = {"mode": mode, "error": (p.stderr or line)[-300:]}
            rec.update(method="residual", round=f"{a.tag}{r}")
            out.write(json.dumps(rec) + "\n")
            out.flush()
            print("residual " + json.dumps(rec), flush=True)


def events(a) -> None:
    """--method events: bench/gpu/event_timing.cu, one process per round."""
    binary = cuda_binary("event_timing", cupti=True)
    out = open(a.jsonl, "a")
    for r in range(a.rounds):
        p = subprocess.run(
            ["taskset", "-c", a.cpus or "2", binary], env=clean_env(), capture_output=True, text=True, timeout=300
        )
        lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
        if not lines:
            lines = [json.dumps({"error": (p.stderr or p.stdout)[-300:]})]
        for line in lines:
            rec = json.loads(line)
            rec.update(method="events", round=f"{a.tag}{r}")
            out.write(json.dumps(rec) + "\n")
            print("events " + json.dumps(rec), flush=True)


def bootstrap_ci(vals: list[float], stat=statistics.median, n: int = 2000) -> tuple[float, float]:
    rng = random.Random(0)
    draws = sorted(stat([rng.choice(vals) for _ in vals]) for _ in range(n))
    return draws[int(0.025 * n)], draws[int(0.975 * n) - 1]


def summarize(path: str) -> list[dict]:
    """Per (workload, phase, config): medians and ratios against that phase's baseline."""
    recs = [r for r in map(json.loads, open(path)) if {"workload", "phase", "config", "round"} <= r.keys()]
    by: dict = {}
    for r in recs:
        by.setdefault((r["workload"], r["phase"], r["config"]), {})[r["round"]] = r
    for r in recs:  # files written before the levels were kept (all of them ran --wait 8)
        if "us_fast" not in r and "trace" in r and "ready" in r:
            r.update(levels([b[1] for b in r["trace"] if b[0] >= r["ready"] + r.get("skip_s", 8.0)]))
    rows = []
    for (w, ph, c), runs in sorted(by.items()):
        base = by.get((w, ph, "baseline"), {})
        row = {
            "workload": w,
            "phase": ph,
            "config": c,
            "n": len(runs),
            "us_median": statistics.median(r["us_per_step"] for r in runs.values()),
        }
        agent = [r for r in runs.values() if "agent_cpu_pct" in r]
        if agent:
            row["agent_cpu_pct"] = statistics.median(r["agent_cpu_pct"] for r in agent)
            row["agent_peak_mib"] = max(r["agent_peak_mib"] for r in agent)
        if c != "baseline" and base:
            row["mean_ratio"] = (
                statistics.fmean(r["us_per_step"] for r in runs.values())
                / statistics.fmean(r["us_per_step"] for r in base.values())
                - 1
            )
            paired = [runs[k]["us_per_step"] / base[k]["us_per_step"] - 1 for k in runs if k in base]
            if paired:
                row["paired_median"] = statistics.median(paired)
                row["paired_ci"] = bootstrap_ci(paired) if len(paired) > 2 else None
                row["paired_min_max"] = (min(paired), max(paired))
            # --trace-seconds: the blocks' mean, what a job's step time reads (the median
            # block leaves the slow blocks out, windows' among them)
            thru = [runs[k]["us_mean"] / base[k]["us_mean"] - 1 for k in runs if k in base and "us_mean" in runs[k]]
            if thru:
                row["throughput_median"] = statistics.median(thru)
                row["throughput_ci"] = bootstrap_ci(thru) if len(thru) > 2 else None
                row["throughput_min_max"] = (min(thru), max(thru))
            fast = [runs[k]["us_fast"] / base[k]["us_fast"] - 1 for k in runs if k in base and "us_fast" in runs[k]]
            if fast:
                row["fast_median"] = statistics.median(fast)
                row["fast_ci"] = bootstrap_ci(fast) if len(fast) > 2 else None
                row["slow_shares"] = tuple(
                    statistics.median(r[k]["slow_share"] for k in runs if k in base) for r in (runs, base)
                )
        rows.append(row)
    return rows


def print_table(path: str) -> None:
    print(
        "| workload | phase | config | runs | µs/step (median) | mean ratio "
        "| paired median [95 % CI] (min, max); with --trace-seconds, the blocks' mean too | agent CPU, peak RSS |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in summarize(path):
        ratio = f"{100 * r['mean_ratio']:+.1f} %" if "mean_ratio" in r else ""
        paired = ""
        if "paired_median" in r:
            paired = f"{100 * r['paired_median']:+.1f} %"
            if r.get("paired_ci"):
                lo, hi = r["paired_ci"]
                paired += f" [{100 * lo:+.1f}, {100 * hi:+.1f}]"
            mn, mx = r["paired_min_max"]
            paired += f" ({100 * mn:+.1f}, {100 * mx:+.1f})"
        if "throughput_median" in r:
            paired += f"; throughput {100 * r['throughput_median']:+.1f} %"
            if r.get("throughput_ci"):
                lo, hi = r["throughput_ci"]
                paired += f" [{100 * lo:+.1f}, {100 * hi:+.1f}]"
            mn, mx = r["throughput_min_max"]
            paired += f" ({100 * mn:+.1f}, {100 * mx:+.1f})"
        if "fast_median" in r:
            paired += f"; fast level {100 * r['fast_median']:+.1f} %"
            if r.get("fast_ci"):
                lo, hi = r["fast_ci"]
                paired += f" [{100 * lo:+.1f}, {100 * hi:+.1f}]"
            paired += ", slow blocks {:.0f} % against {:.0f} %".format(*(100 * x for x in r["slow_shares"]))
        cost = f"{r['agent_cpu_pct']:.1f} %, {r['agent_peak_mib']:.0f} MiB" if "agent_cpu_pct" in r else ""
        print(
            f"| {r['workload']} | {r['phase']} | {r['config']} | {r['n']} | {r['us_median']:.2f} "
            f"| {ratio} | {paired} | {cost} |"
        )
