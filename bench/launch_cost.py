"""CPU cost per launch on the mock CUDA stack, and the agent's own footprint.

Three configs, interleaved A/B/C rounds, medians reported:
  none   : the mock workload with no shim
  idle   : shim injected (CUDA_INJECTION64_PATH), no agent attached
  agent  : shim injected + `gpu-agent run` at default sampling

Per launch we report (a) the launching loop's wall ns per launch, as the app
sees it, and (b) the whole process's CPU ns per launch (user+sys of every
thread, CUPTI's buffer thread included, from wait4 rusage). While the agent
runs we sample its CPU time and RSS from /proc to get its CPU% and peak RSS at
the launch rate reached.

Usage (root): .venv/bin/python bench/launch_cost.py [--launches 2000000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agent_proc import start_agent  # this directory

REPO = Path(__file__).resolve().parent.parent
MOCK = REPO / "build" / "mock"
APP = MOCK / "mock_workload"
SHIM = REPO / "build" / "libgpu_agent_shim.so"
CLK = os.sysconf("SC_CLK_TCK")


def env_for(shim: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_AGENT_", "CUDA_INJECTION"))}
    env["LD_LIBRARY_PATH"] = str(MOCK)
    if shim:
        env["CUDA_INJECTION64_PATH"] = str(SHIM)
    return env


def run_app(n: int, api: str, shim: bool, rate: float = 0) -> dict:
    """One workload process -> {loop, thread_cpu, process_cpu} ns per launch, and launches/s."""
    p = subprocess.Popen(
        [str(APP), "--bench", str(n), "--api", api, "--rate", str(rate)],
        env=env_for(shim),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _, status, ru = os.wait4(p.pid, 0)
    out = p.stdout.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"workload failed: {p.stderr.read().strip()}")
    f = dict(kv.split("=") for kv in out.split())
    return {
        "loop": float(f["ns_per_launch"]),
        "thread_cpu": float(f["cpu_ns_per_launch"]),
        "process_cpu": (ru.ru_utime + ru.ru_stime) * 1e9 / n,
        "rate": float(f["launches_per_s"]),
    }


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK


def proc_rss_mb(pid: int, key: str = "VmHWM") -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) / 1024
    return 0.0


class AgentRun:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="gpu-agent-bench-")
        self.p = start_agent(self.dir, "2s")

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--api", default="cuLaunchKernel")
    ap.add_argument(
        "--rate", type=float, default=250_000, help="paced launch rate for the agent-footprint phase (launches/s)"
    )
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (the agent loads eBPF)")

    # Phase 1: flat-out launch loops, interleaved none/idle/agent.
    res = {"none": [], "idle": [], "agent": []}
    for _ in range(a.rounds):
        res["none"].append(run_app(a.launches, a.api, shim=False))
        res["idle"].append(run_app(a.launches, a.api, shim=True))
        agent = AgentRun()
        try:
            res["agent"].append(run_app(a.launches, a.api, shim=True))
        finally:
            agent.stop()

    def med(k, f):
        return statistics.median(x[f] for x in res[k])

    print(f"mock launch cost, api={a.api}, {a.launches} launches x {a.rounds} interleaved rounds (medians)")
    print(f"{'config':<7} {'loop ns':>8} {'thread CPU ns':>14} {'process CPU ns':>15} {'process CPU over none':>22}")
    for k in ("none", "idle", "agent"):
        print(
            f"{k:<7} {med(k, 'loop'):>8.1f} {med(k, 'thread_cpu'):>14.1f} {med(k, 'process_cpu'):>15.1f} "
            f"{med(k, 'process_cpu') - med('none', 'process_cpu'):>+22.1f}"
        )
    print(f"flat-out rate with agent: {med('agent', 'rate') / 1e6:.2f}M launches/s")

    # Phase 2: the agent's own footprint at a paced, realistic-but-high kernel rate.
    n = int(a.rate * 4)  # about 4 s per run
    cpu, rss, app_agent, app_none = [], [], [], []
    for _ in range(max(1, a.rounds // 2)):
        app_none.append(run_app(n, a.api, shim=False, rate=a.rate)["process_cpu"])
        agent = AgentRun()
        try:
            c0, t0 = proc_cpu_s(agent.p.pid), time.perf_counter()
            r = run_app(n, a.api, shim=True, rate=a.rate)
            time.sleep(0.2)  # let the last batch be consumed
            c1, t1 = proc_cpu_s(agent.p.pid), time.perf_counter()
            cpu.append(100 * (c1 - c0) / (t1 - t0))
            rss.append(proc_rss_mb(agent.p.pid))
            app_agent.append(r["process_cpu"])
        finally:
            agent.stop()
    print(
        f"at {a.rate / 1e3:.0f}k launches/s: agent CPU {statistics.median(cpu):.1f}% of one core "
        f"(max {max(cpu):.1f}%), agent peak RSS {max(rss):.0f} MB; app process CPU per launch "
        f"{statistics.median(app_none):.0f} ns without shim, {statistics.median(app_agent):.0f} ns with agent"
    )


if __name__ == "__main__":
    main()
