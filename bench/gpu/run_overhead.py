"""Interleaved overhead runs on one GPU node; prints a table of medians.

Workloads (issue 3): eager, mlp, graph (torch.cuda.graph replay), compiled
(torch.compile / Triton), driver-graph (cuGraphLaunch from bench/gpu/driver_graph.cu),
and mlp-x4 (four mlp processes sharing the GPU at once; their mean per-step time).

Configs: baseline; shim-no-agent (injected, no agent anywhere); shim+agent
(`gpu-agent run` at its defaults: the shim collects in one GPU_AGENT_WINDOW_MS
window of every GPU_AGENT_DUTY_CYCLE = 10); shim+agent-w100 (the same with
100 ms windows, the earlier default); shim+agent-continuous (GPU_AGENT_DUTY_CYCLE=1:
every kernel); torch.profiler (CPU + CUDA activities; not for driver-graph).
Diagnostics, only when named in --configs: shim+agent-idle (attached, a window
practically never opens), shim+agent-hold-activity / -hold-callbacks (one CUPTI
switch held on throughout; GPU_AGENT_EXP_HOLD; the launch callbacks now stay on
while attached anyway, so -hold-callbacks equals shim+agent since then). --paired also runs the baseline
inside the agent phase (it never loads the shim), for within-round ratios.

Each process reports the TIME AVERAGE per step over --seconds (default 3) after
its warm-up: duty-cycled collection costs only inside its windows, so short
repeats and their median would understate it (overhead.py's measure()).

Each measurement is a fresh process. A round runs every workload under the
configs without an agent, then starts ONE agent and runs every workload under
the agent configs (the agent raises the shim's semaphore in every process on
the node, so it cannot be up during the no-agent configs); rounds repeat, so
configs alternate A/B/A/B. The per-config order within a round is shuffled.
Results are appended as JSON lines to --results, so several invocations (each
under the node's per-command time limit) add up; --table prints the table of
medians over everything in --results. The agent's CPU time and peak RSS are
read from /proc while each workload runs.

Usage (root, on the GPU node):
  python3 bench/gpu/run_overhead.py --rounds 2 --results /tmp/ovh.jsonl [--cpus 2-9]
  python3 bench/gpu/run_overhead.py --results /tmp/ovh.jsonl --table
"""

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE.parent))
from agent_proc import start_agent  # noqa: E402  (bench/agent_proc.py)
SHIM = REPO / "build" / "libgpu_agent_shim.so"
WORKLOADS = ["eager", "mlp", "graph", "compiled", "driver-graph", "mlp-x4"]
NO_AGENT = ["baseline", "shim-no-agent", "torch.profiler"]
WITH_AGENT = ["shim+agent", "shim+agent-w100", "shim+agent-continuous",
              "shim+agent-hold-activity", "shim+agent-hold-callbacks", "shim+agent-idle"]
# The agent configs' shim settings. The hold-* ones are diagnostics (their
# estimates are wrong): one of the two CUPTI switches stays on throughout, to
# tell which switch costs what (shim.cpp, GPU_AGENT_EXP_HOLD).
AGENT_ENV = {"shim+agent-continuous": {"GPU_AGENT_DUTY_CYCLE": "1"},
             "shim+agent-w100": {"GPU_AGENT_WINDOW_MS": "100"},
             "shim+agent-hold-activity": {"GPU_AGENT_EXP_HOLD": "activity"},
             "shim+agent-hold-callbacks": {"GPU_AGENT_EXP_HOLD": "callbacks"},
             # attached (subscribed, poller running) but a window practically never opens
             "shim+agent-idle": {"GPU_AGENT_DUTY_CYCLE": "100000"}}
CONFIGS = ["baseline", "shim-no-agent", "shim+agent", "shim+agent-w100", "shim+agent-continuous",
           "torch.profiler"]  # the default set; the hold-* diagnostics only when named
SECONDS = 3.0  # --seconds
STEPS = {"eager": 2000, "mlp": 2000, "graph": 5000, "compiled": 1000, "driver-graph": 5000,
         "mlp-x4": 2000}


def driver_graph_binary() -> str:
    out = REPO / "build" / "bench" / "driver_graph"
    src = HERE / "driver_graph.cu"
    if not out.exists() or out.stat().st_mtime < src.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(["nvcc", "-O2", "-o", str(out), str(src), "-lcuda"], check=True)
    return str(out)


def command(workload: str, config: str) -> list[str]:
    if workload == "driver-graph":
        return [driver_graph_binary(), str(STEPS[workload]), "--bench", str(SECONDS)]
    base = workload.removesuffix("-x4")
    return [sys.executable, str(HERE / "overhead.py"), base, "--config", config,
            "--steps", str(STEPS[workload]), "--seconds", str(SECONDS)]


SHIM_ENV: dict = {}  # --shim-env K=V: extra shim settings for the shim configs


def clean_env() -> dict:
    """This environment without any shim injection or shim settings."""
    return {k: v for k, v in os.environ.items()
            if k != "CUDA_INJECTION64_PATH" and not k.startswith("GPU_AGENT_")}


def env_for(config: str) -> dict:
    env = clean_env()
    if config.startswith("shim"):
        env["CUDA_INJECTION64_PATH"] = str(SHIM)
        env.update(SHIM_ENV)
    env.update(AGENT_ENV.get(config, {}))
    return env


def one(workload: str, config: str, cpus: list[int]) -> float:
    """Per-step µs of one fresh process (mean of 4 for -x4)."""
    n = 4 if workload.endswith("-x4") else 1
    procs = []
    for i in range(n):
        cmd = command(workload, config)
        if cpus:
            cmd = ["taskset", "-c", str(cpus[i % len(cpus)])] + cmd
        procs.append(subprocess.Popen(cmd, env=env_for(config), stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    vals = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"{workload}/{config} failed: {err[-2000:]}")
        vals.append(json.loads(out.strip().splitlines()[-1])["us_per_step"])
    return statistics.mean(vals)


class Agent:
    """`gpu-agent run` at its defaults, with /proc readings of its own cost."""

    def __init__(self, prof_dir: str, interval: str = "10s"):
        self.p = start_agent(prof_dir, interval)

    def cpu_s(self) -> float:
        with open(f"/proc/{self.p.pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def rss_mib(self) -> float:
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> None:
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=60)


def run_rounds(a, out) -> None:
    workloads = a.workloads.split(",")
    configs = a.configs.split(",")
    cpus = parse_cpus(a.cpus)
    prof_dir = a.profiles or tempfile.mkdtemp(prefix="gpu-agent-prof-")
    for r in range(a.rounds):
        for phase in (NO_AGENT, WITH_AGENT):
            todo = [c for c in phase if c in configs]
            # --paired: baseline runs (no shim loaded, so the agent cannot touch
            # them) also inside the agent phase, A/B against the agent configs.
            if a.paired and phase is WITH_AGENT and todo and "baseline" in configs:
                todo.append("baseline")
            if not todo:
                continue
            agent = Agent(prof_dir) if phase is WITH_AGENT else None
            try:
                for w in workloads:
                    order = [c for c in todo if not (w == "driver-graph" and c == "torch.profiler")]
                    random.shuffle(order)
                    for c in order:
                        t0, c0 = time.monotonic(), agent.cpu_s() if agent else 0.0
                        us = one(w, c, cpus)
                        rec = {"round": a.tag + str(r), "workload": w, "config": c, "us_per_step": us,
                               "seconds": SECONDS, "phase": "agent" if agent else "no-agent"}
                        if agent:
                            rec["agent_cpu_pct"] = round(100 * (agent.cpu_s() - c0) / (time.monotonic() - t0), 2)
                            rec["agent_rss_mib"] = round(agent.rss_mib(), 1)
                        out.write(json.dumps(rec) + "\n")
                        out.flush()
                        print(f"round {r} {w:12} {c:22} {us:9.2f} us/step"
                              + (f"  agent {rec['agent_cpu_pct']:.1f} % CPU, {rec['agent_rss_mib']:.0f} MiB"
                                 if agent else ""), file=sys.stderr, flush=True)
            finally:
                if agent:
                    agent.stop()


def parse_cpus(spec: str) -> list[int]:
    cpus: list[int] = []
    for part in filter(None, (spec or "").split(",")):
        lo, _, hi = part.partition("-")
        cpus += list(range(int(lo), int(hi or lo) + 1))
    return cpus


def table(path: str) -> None:
    res: dict = {}
    agent: dict = {}
    for line in open(path):
        rec = json.loads(line)
        res.setdefault((rec["workload"], rec["config"]), []).append(rec["us_per_step"])
        if "agent_cpu_pct" in rec:
            agent.setdefault((rec["workload"], rec["config"]), []).append(
                (rec["agent_cpu_pct"], rec["agent_rss_mib"]))
    workloads = [w for w in WORKLOADS if any(k[0] == w for k in res)]
    configs = [c for c in CONFIGS + WITH_AGENT[3:] if any(k[1] == c for k in res)]
    print("| per step, µs (median; runs) | " + " | ".join(workloads) + " |")
    print("|---|" + "---|" * len(workloads))
    for c in configs:
        cells = []
        for w in workloads:
            v = res.get((w, c))
            if not v:
                cells.append("n/a")
                continue
            m = statistics.median(v)
            base = statistics.median(res[(w, "baseline")]) if (w, "baseline") in res else None
            pct = "" if c == "baseline" or not base else f" ({100 * (m / base - 1):+.1f} %)"
            cells.append(f"{m:.1f}{pct}; n={len(v)}")
        print(f"| {c} | " + " | ".join(cells) + " |")
    print()
    print("| agent, per workload run (median) | " + " | ".join(workloads) + " |")
    print("|---|" + "---|" * len(workloads))
    for c in WITH_AGENT:
        cells = []
        for w in workloads:
            v = agent.get((w, c))
            cells.append(f"{statistics.median(x[0] for x in v):.1f} % CPU, "
                         f"{max(x[1] for x in v):.0f} MiB" if v else "n/a")
        print(f"| {c} | " + " | ".join(cells) + " |")
    # Spread of each config's runs, for judging the noise.
    print()
    for (w, c), v in sorted(res.items()):
        print(f"{w:12} {c:22} min {min(v):9.2f} max {max(v):9.2f} n={len(v)}")


def main():
    global SECONDS
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--results", default="/tmp/gpu-agent-overhead.jsonl",
                    help="JSON lines, appended to (several invocations add up)")
    ap.add_argument("--cpus", default="", help="pin each workload process to one of these CPUs (e.g. 2-9)")
    ap.add_argument("--profiles", default=None, help="directory for the agent's profiles")
    ap.add_argument("--tag", default="", help="prefix of this invocation's round names")
    ap.add_argument("--table", action="store_true", help="only print the table of --results")
    ap.add_argument("--shim-env", action="append", default=[], metavar="K=V",
                    help="extra environment for the shim configs (e.g. GPU_AGENT_WINDOW_MS=20)")
    ap.add_argument("--paired", action="store_true",
                    help="also run the baseline inside the agent phase, interleaved with the agent configs")
    ap.add_argument("--seconds", type=float, default=SECONDS,
                    help="time-average each process over this long after its warm-up")
    a = ap.parse_args()
    SECONDS = a.seconds
    SHIM_ENV.update(kv.split("=", 1) for kv in a.shim_env)
    if not a.table:
        with open(a.results, "a") as out:
            run_rounds(a, out)
    table(a.results)


if __name__ == "__main__":
    main()
