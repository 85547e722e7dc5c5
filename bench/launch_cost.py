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


def run_app(n: int, api: str, shim: bool) -> tuple[float, float, float]:
    """-> (loop ns/launch, process CPU ns/launch, launches/s)."""
    t0 = time.perf_counter()
    p = subprocess.Popen([str(APP), "--bench", str(n), "--api", api], env=env_for(shim),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    out = p.stdout.read()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"workload failed: {p.stderr.read().strip()}")
    loop_ns = float(out.split("ns_per_launch=")[1].split()[0])
    cpu_ns = (ru.ru_utime + ru.ru_stime) * 1e9 / n
    return loop_ns, cpu_ns, n / (loop_ns * n / 1e9) if loop_ns else n / wall


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
        self.p = subprocess.Popen([sys.executable, "-m", "gpu_agent", "run", "--output-dir", self.dir,
                                   "--interval", "2s"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
        seen = []
        for line in self.p.stderr:  # wait until every probe is attached
            seen.append(line)
            if "watching" in line:
                break
        else:
            sys.exit("agent failed to start: " + "".join(seen))

    def stop(self):
        self.p.send_signal(signal.SIGTERM)
        self.p.wait(timeout=60)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--launches", type=int, default=2_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--api", default="cuLaunchKernel")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench: run as root (the agent loads eBPF)")

    res = {"none": [], "idle": [], "agent": []}
    agent_cpu, agent_rss, rates = [], [], []
    for _ in range(a.rounds):
        res["none"].append(run_app(a.launches, a.api, shim=False))
        res["idle"].append(run_app(a.launches, a.api, shim=True))
        agent = AgentRun()
        try:
            c0, t0 = proc_cpu_s(agent.p.pid), time.perf_counter()
            r = run_app(a.launches, a.api, shim=True)
            time.sleep(0.2)  # let the last batch be consumed
            c1, t1 = proc_cpu_s(agent.p.pid), time.perf_counter()
            res["agent"].append(r)
            agent_cpu.append(100 * (c1 - c0) / (t1 - t0))
            agent_rss.append(proc_rss_mb(agent.p.pid))
            rates.append(r[2])
        finally:
            agent.stop()

    med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v)) for k, v in res.items()}
    print(f"mock launch cost, api={a.api}, {a.launches} launches x {a.rounds} interleaved rounds (medians)")
    print(f"{'config':<8} {'loop ns/launch':>15} {'process CPU ns/launch':>22} {'over none (loop)':>17}")
    for k in ("none", "idle", "agent"):
        print(f"{k:<8} {med[k][0]:>15.1f} {med[k][1]:>22.1f} {med[k][0] - med['none'][0]:>+17.1f}")
    print(f"agent: CPU {statistics.median(agent_cpu):.1f}% of one core (max {max(agent_cpu):.1f}%), "
          f"peak RSS {max(agent_rss):.0f} MB, at {statistics.median(rates) / 1e3:.0f}k launches/s")


if __name__ == "__main__":
    main()
